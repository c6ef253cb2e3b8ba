"""A merged canary gets traffic, and is judged, only once it is deployed and ready.

Pure parts (`decide_ready`, `deployment_ready`) over their inputs; the
controller on real bare git repos with a scripted readiness answer; the
Kubernetes backend against a stand-in API server (no Kubernetes API server can
run on these machines), answering the apps/v1 Deployment JSON the official
client asks for; the platform backend on a status file as the sync writes it.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading

import pytest

from cogs.files import atomic_write_json
from gitops.writeback import WriteBack
from local.platform.readiness import PlatformReadiness
from local.platform.workdir import Workdir
from promotion.cluster.readiness import (
    KubernetesReadiness,
    Readiness,
    deployment_ready,
    routing_applied,
)
from promotion.controller import Controller, ControllerConfig
from promotion.decision.analysis import decide, decide_ready
from promotion.decision.observations import Observations, VersionWindow
from promotion.decision.policy import load_policy
from promotion.decision.state import CanaryState, Phase
from promotion.gitrepo import apply
from serving import manifests
from tests.fixtures.promotion_controller import (
    MODEL,
    TEST_POLICY,
    Clock,
    RouterStub,
    canary_weight,
    decision_log,
    git,
    main_state,
    merge_to_main,
)

T0 = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.timezone.utc)
POLICY = load_policy({**TEST_POLICY, "ready_timeout": "10m", "no_traffic_grace": "30s"})
WAITING = CanaryState(model=MODEL, phase=Phase.WAITING, stable="v1", candidate="v2", weight=0,
                      started_at=T0, step_started_at=T0)


@pytest.mark.parametrize("waited", [0, 60, 599])
def test_not_ready_holds_without_judging(waited):
    now = T0 + dt.timedelta(seconds=waited)
    decision = decide_ready(POLICY, WAITING, False, "deployment not found", now)
    assert decision.kind == "hold" and decision.cause == "not-ready"
    assert decision.state == WAITING  # nothing to commit
    assert "deployment not found" in decision.reason


def test_ready_steps_to_the_first_weight_and_starts_the_clocks_then():
    now = T0 + dt.timedelta(seconds=200)  # e.g. Argo CD's poll and an image pull later
    decision = decide_ready(POLICY, WAITING, True, "2/2 replicas ready", now)
    assert decision.kind == "step" and decision.to == 10 and decision.cause == "ready"
    state = decision.state
    assert (state.phase, state.weight) == (Phase.PROGRESSING, 10)
    assert state.started_at == now and state.step_started_at == now
    assert state.canary_silent_since is None and state.empty_intervals == 0


def test_never_ready_is_rolled_back_after_ready_timeout_naming_why():
    now = T0 + dt.timedelta(minutes=10)
    decision = decide_ready(POLICY, WAITING, False, "1 of 2 replicas ready", now)
    assert decision.kind == "rollback" and decision.cause == "not-ready"
    assert "not deployed and ready after 600s" in decision.reason
    assert "1 of 2 replicas ready" in decision.reason
    assert decision.state.weight == 0 and decision.state.phase is Phase.ROLLED_BACK


def test_a_window_never_judges_a_waiting_canary():
    """Even a window that looks like a dead canary (stable busy, canary silent)."""
    obs = Observations(canary=VersionWindow(requests=0), stable=VersionWindow(requests=10_000),
                       window_seconds=3600)
    decision = decide(POLICY, WAITING, obs, T0 + dt.timedelta(hours=1))
    assert decision.kind == "hold" and decision.cause == "not-ready"


class Scripted:
    """A readiness answer the test flips (the runtime is what is scripted here)."""

    def __init__(self) -> None:
        self.ready = False
        self.asked: list[str] = []
        self.routing = True
        self.routes_asked: list[dict] = []

        self.lasting: str | None = None  # a failure no wait fixes, with its reason

    def check(self, model, version, desired):
        self.asked.append(version)
        assert desired is not None and desired["kind"] == "Deployment"  # git's Deployment
        if self.lasting is not None and not self.ready:
            return Readiness(False, self.lasting, lasting=True)
        return Readiness(self.ready, "2/2 replicas ready" if self.ready else "not applied yet")

    def routed(self, model, weights):
        self.routes_asked.append(dict(weights))
        return Readiness(self.routing, "applied" if self.routing else "the step is not applied")


def test_controller_waits_for_readiness_then_commits_the_first_step(tmp_path, promotion_repo):
    merge_to_main(promotion_repo, "v2", {**TEST_POLICY, "no_traffic_grace": "5s"}, ready=False)
    assert main_state(promotion_repo)["phase"] == "waiting"
    assert canary_weight(promotion_repo) == 0
    merged = float(git(promotion_repo, "log", "-1", "--format=%ct", "main").strip())
    clock, readiness, source = Clock(merged), Scripted(), RouterStub(promotion_repo)
    controller = Controller(ControllerConfig(repo=str(promotion_repo), workdir=tmp_path / "w"),
                            source, clock=clock, readiness=readiness)
    before = git(promotion_repo, "rev-parse", "main")
    for _ in range(60):  # a minute: twelve times the no-traffic grace
        clock.advance(1.0)
        controller.tick()
    assert git(promotion_repo, "rev-parse", "main") == before  # no rollback, no commit
    assert source.calls == [] and len(readiness.asked) == 60  # nothing was judged

    readiness.ready = True
    clock.advance(1.0)
    controller.tick()
    state = main_state(promotion_repo)
    assert (state["phase"], state["weight"]) == ("progressing", 10)
    assert canary_weight(promotion_repo) == 10
    subject = git(promotion_repo, "log", "-1", "--format=%s", "main").strip()
    assert subject == "canary(shapes): 0% -> 10% (v2 over v1)"
    trailers = git(promotion_repo, "log", "-1", "--format=%(trailers:only,unfold)", "main")
    assert "Mlops-Decision: step/ready" in trailers and "2/2 replicas ready" in trailers
    for _ in range(8):  # analysis runs from here on
        clock.advance(1.0)
        controller.tick()
    assert source.calls
    assert decision_log(promotion_repo)[0]["subject"] == "canary(shapes): 10% -> 25% (v2 over v1)"
    controller.close()


def test_a_candidate_that_cannot_become_ready_is_rolled_back_at_once(tmp_path, promotion_repo):
    """Issue 43: a warm-up inference that fails on every try (a 32x32 resize the graph
    cannot reshape) waited the whole ready_timeout (15 minutes by default) for nothing.
    The runtime says the failure is lasting: the next pass rolls back, naming it. A
    transient "not ready" before it still waits (the first ten passes)."""
    merge_to_main(promotion_repo, "v2", TEST_POLICY, ready=False)
    merged = float(git(promotion_repo, "log", "-1", "--format=%ct", "main").strip())
    clock, readiness = Clock(merged), Scripted()
    controller = Controller(ControllerConfig(repo=str(promotion_repo), workdir=tmp_path / "w"),
                            RouterStub(promotion_repo), clock=clock, readiness=readiness)
    before = git(promotion_repo, "rev-parse", "main")
    for _ in range(10):
        clock.advance(1.0)
        controller.tick()
    assert git(promotion_repo, "rev-parse", "main") == before  # still loading: it waits

    readiness.lasting = ("shapes v2 cannot serve: warm-up inference failed: inference failed: "
                         "(InvalidArgument) The 'shape' in ReshapeOp is invalid")
    clock.advance(1.0)
    outcomes = controller.tick()
    controller.close()
    assert [(o.kind, o.cause) for o in outcomes] == [("rollback", "not-ready")]
    state = main_state(promotion_repo)
    assert (state["phase"], state["weight"]) == ("rolled_back", 0)
    message = git(promotion_repo, "log", "-1", "--format=%B", "main")
    assert message.startswith("rollback(shapes): 0% -> 0% (v2 over v1)")
    assert "Mlops-Decision: rollback/not-ready" in message
    reason = next(line for line in message.splitlines() if line.startswith("Mlops-Reason:"))
    assert "cannot become ready: shapes v2 cannot serve: warm-up inference failed" in reason
    assert "ReshapeOp is invalid" in reason
    assert "rolled back after 11s, not after ready_timeout 900s" in reason
    assert "deployment-v2.yaml" not in git(promotion_repo, "ls-tree", "--name-only",
                                           f"main:apps/{MODEL}")


def test_a_promotion_asked_for_waits_until_the_candidate_is_ready(tmp_path, promotion_repo):
    """Make-before-break for a person's promote too: it moves all the traffic to the
    candidate, so a candidate that is not ready (its pod restarting, say) is promoted
    only once it is."""
    merge_to_main(promotion_repo, "v2", TEST_POLICY)  # ready: at its first step
    merged = float(git(promotion_repo, "log", "-1", "--format=%ct", "main").strip())
    apply.human_commit(WriteBack(str(promotion_repo)), "main", MODEL, "promote", "carol",
                       T0)
    clock, readiness = Clock(merged + 1), Scripted()
    controller = Controller(ControllerConfig(repo=str(promotion_repo), workdir=tmp_path / "w"),
                            RouterStub(promotion_repo), clock=clock, readiness=readiness)
    requested = git(promotion_repo, "rev-parse", "main")
    for _ in range(3):
        clock.advance(1.0)
        assert controller.tick() == []
    assert git(promotion_repo, "rev-parse", "main") == requested and readiness.asked
    readiness.ready = True
    clock.advance(1.0)
    assert [(o.kind, o.cause) for o in controller.tick()] == [("promote", "requested")]
    controller.close()
    assert (main_state(promotion_repo)["phase"], main_state(promotion_repo)["stable"]) == \
        ("promoted", "v2")


def test_a_step_is_judged_only_once_the_router_has_it(tmp_path, promotion_repo):
    """Argo CD applies the step commit minutes later: until then the canary still gets the
    previous share, and "no traffic" there is not "down" (this rolled back every canary
    on the cluster-latency platform)."""
    merge_to_main(promotion_repo, "v2", {**TEST_POLICY, "no_traffic_grace": "5s"}, ready=False)
    merged = float(git(promotion_repo, "log", "-1", "--format=%ct", "main").strip())
    clock, readiness, source = Clock(merged), Scripted(), RouterStub(promotion_repo)
    readiness.ready, readiness.routing = True, False
    controller = Controller(ControllerConfig(repo=str(promotion_repo), workdir=tmp_path / "w"),
                            source, clock=clock, readiness=readiness)
    clock.advance(1.0)
    controller.tick()  # ready: the first step is committed
    assert canary_weight(promotion_repo) == 10
    first_step = git(promotion_repo, "rev-parse", "main")
    for _ in range(60):  # twelve times the no-traffic grace with the step not applied
        clock.advance(1.0)
        controller.tick()
    assert git(promotion_repo, "rev-parse", "main") == first_step  # no rollback
    assert source.calls == []  # no window was judged
    assert readiness.routes_asked[-1] == {"v1": 90, "v2": 10}  # git's split, per version

    readiness.routing = True
    asked = len(readiness.routes_asked)
    for _ in range(8):
        clock.advance(1.0)
        controller.tick()
    assert source.calls  # judged from here on
    commits = decision_log(promotion_repo)
    assert commits[0]["subject"] == "canary(shapes): 10% -> 25% (v2 over v1)"
    # Asked once per commit (the step that went live, then each new step), not every pass.
    assert len(readiness.routes_asked) - asked <= 1 + len(commits) < 8
    controller.close()


@pytest.mark.parametrize("live, ready, words", [
    (None, False, "no VirtualService"),
    ({"v1": 100}, False, "the router sends v1 100%, git says v1 90%/v2 10%"),
    ({"v1": 90, "v2": 10, "v3": 0}, True, "v1 90%/v2 10%"),
])
def test_routing_applied_compares_the_live_split_with_git(live, ready, words):
    answer = routing_applied(live, {"v1": 90, "v2": 10}, "shapes")
    assert answer.ready is ready and words in answer.reason


LIVE = {
    "metadata": {"name": "shapes-v2", "generation": 2},
    "spec": {"replicas": 2, "template": {"metadata": {"annotations": {
        "mlops.paddle.org/weights-sha256": "b" * 64}}}},
    "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
               "availableReplicas": 2, "readyReplicas": 2},
}
DESIRED = {"kind": "Deployment", "spec": {"template": {"metadata": {"annotations": {
    "mlops.paddle.org/weights-sha256": "b" * 64}}}}}


def _live(**status):
    doc = json.loads(json.dumps(LIVE))
    doc["status"].update(status)
    return doc


@pytest.mark.parametrize("live, ready, words", [
    (None, False, "not found: the merge is not applied yet"),
    (LIVE, True, "2/2 replicas ready"),
    (_live(observedGeneration=1), False, "generation not observed"),
    (_live(updatedReplicas=1), False, "1 of 2 replicas updated"),
    (_live(replicas=3), False, "old replicas pending termination"),
    (_live(availableReplicas=1), False, "1 of 2 replicas ready"),
    (_live(conditions=[{"type": "Progressing", "reason": "ProgressDeadlineExceeded"}]), False,
     "exceeded its progress deadline"),
])
def test_deployment_ready_follows_flaggers_rules(live, ready, words):
    answer = deployment_ready(live, DESIRED, "shapes-v2")
    assert answer.ready is ready and words in answer.reason
    # Only Kubernetes giving up on the rollout is a failure no wait fixes.
    assert answer.lasting is ("progress deadline" in words)


def test_an_older_deployment_of_the_same_name_is_not_this_merge():
    older = json.loads(json.dumps(LIVE))
    older["spec"]["template"]["metadata"]["annotations"]["mlops.paddle.org/weights-sha256"] = \
        "c" * 64
    answer = deployment_ready(older, DESIRED, "shapes-v2")
    assert not answer.ready and "git says bbbbbbbbbbbb" in answer.reason


@pytest.fixture
def api_server():
    """A stand-in Kubernetes API server: GET of one Deployment, 404 for any other."""
    served: dict[str, dict] = {}
    seen: list[str] = []

    class Api(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append(self.path)
            body = served.get(self.path)
            if body is None:
                self.send_response(404)
                payload = json.dumps({"kind": "Status", "code": 404, "reason": "NotFound"})
            else:
                self.send_response(200)
                payload = json.dumps(body)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(payload.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", served, seen
    server.shutdown()


def test_kubernetes_backend_reads_the_deployment_through_the_official_client(api_server):
    # lazy (collection cost): kubernetes loads only when this runs
    from kubernetes import client

    url, served, seen = api_server
    api = client.ApiClient(client.Configuration(host=url))
    readiness = KubernetesReadiness("models", api_client=api)
    first = readiness.check(MODEL, "v2", DESIRED)
    assert not first.ready and "not applied yet" in first.reason
    served["/apis/apps/v1/namespaces/models/deployments/shapes-v2"] = LIVE
    second = readiness.check(MODEL, "v2", DESIRED)
    assert second.ready, second.reason
    assert seen == ["/apis/apps/v1/namespaces/models/deployments/shapes-v2"] * 2


def test_kubernetes_backend_reads_the_live_istio_split(api_server):
    """The Istio objects as Argo CD applied them (networking.istio.io/v1), through the
    official client's CustomObjectsApi; git's split is per version, the live one per
    subset, so the DestinationRule maps one to the other."""
    # lazy (collection cost): kubernetes loads only when this runs
    from kubernetes import client

    url, served, seen = api_server
    readiness = KubernetesReadiness("models", api_client=client.ApiClient(
        client.Configuration(host=url)))
    want = {"v1": 90, "v2": 10}
    assert "no VirtualService" in readiness.routed(MODEL, want).reason  # 404: not applied
    base = "/apis/networking.istio.io/v1/namespaces/models"
    served[f"{base}/destinationrules/{MODEL}"] = manifests.destination_rule(MODEL, "v1", "v2")
    served[f"{base}/virtualservices/{MODEL}"] = manifests.virtual_service(MODEL, 100, 0,
                                                                          canary=True)
    before = readiness.routed(MODEL, want)
    assert not before.ready and "the step is not applied yet" in before.reason
    served[f"{base}/virtualservices/{MODEL}"] = manifests.virtual_service(MODEL, 90, 10,
                                                                          canary=True)
    assert readiness.routed(MODEL, want).ready
    assert f"{base}/virtualservices/{MODEL}" in seen


def test_platform_backend_reads_the_sync_status(tmp_path):
    wd = Workdir(tmp_path)
    readiness = PlatformReadiness(wd)
    assert "no platform status" in readiness.check(MODEL, "v2", None).reason
    wd.status.parent.mkdir(parents=True, exist_ok=True)
    versions = {"v1": {"desired_weight": 100, "ready": True, "phase": "ready", "port": 1}}
    atomic_write_json(wd.status, {"applied_commit": "abc", "models": {MODEL: {
        "versions": versions}}})
    assert "not applied yet" in readiness.check(MODEL, "v2", None).reason
    versions["v2"] = {"desired_weight": 0, "ready": False, "phase": "starting", "port": 2}
    atomic_write_json(wd.status, {"applied_commit": "def", "models": {MODEL: {
        "versions": versions}}})
    answer = readiness.check(MODEL, "v2", None)
    assert not answer.ready and "starting" in answer.reason
    assert not answer.lasting  # starting: it may yet be ready
    # The server said it cannot answer (its warm-up inference failed, never retried).
    versions["v2"]["cannot_serve"] = "warm-up inference failed: ReshapeOp"
    atomic_write_json(wd.status, {"applied_commit": "def", "models": {MODEL: {
        "versions": versions}}})
    answer = readiness.check(MODEL, "v2", None)
    assert not answer.ready and answer.lasting
    assert answer.reason == "shapes v2 cannot serve: warm-up inference failed: ReshapeOp"
    # A new pod starting beside the serving one: not what git says yet, for now.
    versions["v2"].update(cannot_serve=None, phase="ready",
                          successor={"phase": "starting", "port": 3})
    atomic_write_json(wd.status, {"applied_commit": "def", "models": {MODEL: {
        "versions": versions}}})
    answer = readiness.check(MODEL, "v2", None)
    assert not answer.ready and not answer.lasting
    assert "its new pod is starting beside the serving one" in answer.reason
    versions["v2"].update(ready=True, phase="ready", successor=None)
    atomic_write_json(wd.status, {"applied_commit": "def", "models": {MODEL: {
        "versions": versions}}})
    assert readiness.check(MODEL, "v2", None).ready

    # The router: HAProxy's weights of the routed (up) servers, as the sync set them.
    versions["v1"].update(haproxy_weight=100, haproxy_up=True)
    versions["v2"].update(haproxy_weight=0, haproxy_up=True)
    atomic_write_json(wd.status, {"applied_commit": "def", "models": {MODEL: {
        "versions": versions}}})
    waiting = readiness.routed(MODEL, {"v1": 90, "v2": 10})
    assert not waiting.ready and "v1 100%" in waiting.reason
    versions["v1"]["haproxy_weight"], versions["v2"]["haproxy_weight"] = 90, 10
    atomic_write_json(wd.status, {"applied_commit": "ghi", "models": {MODEL: {
        "versions": versions}}})
    assert readiness.routed(MODEL, {"v1": 90, "v2": 10}).ready
