"""The UI's rollback button is make-before-break (issue 43, item 7 and fault drill 9).

A real GitOps repo (`tests/fixtures/ui.py`: det v1 stable, v2 proposed; here v2 is
approved and promoted, so v1's Deployment is gone from the branch) and the real
rollback (`promotion.gitrepo.rollback`): every commit checked here is in git.

What stands in: the runtime's readiness check (`Gate` below), for the local platform's
status file or the Kubernetes API. The real ones need a running model server (a Paddle
start whose timing a test cannot hold still) or an API server; the checks themselves
are tested on their own (tests/promotion/test_promotion_rollback.py drives
`KubernetesReadiness` through the API stand-in, tests/local/ the platform's), and what
is tested here is what the button does with their answers: which commits, in which
order, what the request answers while the version starts, and who may press again.
The stand-in answers "not ready" until the test opens it, so nothing here is timed:
the tests wait for the button's thread with `join` (its timeout only keeps a broken run
from hanging).
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import threading

import pytest
from starlette.testclient import TestClient

from contracts.errors import MlopsError
from gitops.forges.local import LocalForge
from gitops.repo import Mirror
from mlops.ui.actions import Actions, Pending, Runtime, http_status
from mlops.ui.app import UiConfig, UiEndpoints, create_app
from promotion.cluster.readiness import KubernetesReadiness, Readiness
from tests.fixtures.ui import UiRepo, make_ui_repo

HEADERS = {"X-Mlops-UI": "1"}
NEVER = "det v1 cannot serve: its warm-up inference failed (stand-in)"


class Gate:
    """The runtime's answer, standing in for the local platform or Kubernetes: "starting"
    until `open` is set, then ready; with `lasting`, never ready (as a failed warm-up)."""

    def __init__(self, lasting: str | None = None) -> None:
        self.open = threading.Event()
        self.lasting = lasting
        self.asked: list[str] = []

    def check(self, model, version, desired) -> Readiness:
        self.asked.append(version)
        if self.lasting:
            return Readiness(False, self.lasting, lasting=True)
        if self.open.is_set():
            return Readiness(True, f"{model} {version}: 1/1 ready (stand-in)")
        return Readiness(False, f"{model} {version}: starting (stand-in)")

    def routed(self, model, weights) -> Readiness:
        return Readiness(True, "routing not checked")


@pytest.fixture(scope="module")
def promoted_template(tmp_path_factory: pytest.TempPathFactory) -> UiRepo:
    """det v2 approved and promoted: v1 was stable, its Deployment is gone from main."""
    repo = make_ui_repo(tmp_path_factory.mktemp("ui-rollback"))
    Actions(str(repo.gitops), lambda: LocalForge(repo.gitops)).approve(repo.pr, "Grace")
    repo.step_to(100, promote=True)
    return repo


@pytest.fixture
def promoted(promoted_template: UiRepo, tmp_path) -> UiRepo:
    gitops = shutil.copytree(promoted_template.gitops, tmp_path / "gitops.git", symlinks=True)
    return dataclasses.replace(promoted_template, gitops=pathlib.Path(gitops))


def _decisions(repo: UiRepo, n: int) -> list[str]:
    """The `Mlops-Decision` of the newest `n` commits on main, oldest first."""
    with Mirror(repo.gitops) as mirror:
        log = mirror.log(mirror.sha("main") or "")[:n]
    return [c.trailers.get("Mlops-Decision", "") for c in reversed(log)]


def _deployments(repo: UiRepo) -> list[str]:
    with Mirror(repo.gitops) as mirror:
        tip = mirror.sha("main") or ""
        return sorted(p.rsplit("/", 1)[-1] for p in mirror.ls(tip, "apps/det")
                      if "deployment-" in p)


def _actions(repo: UiRepo, runtime: Runtime) -> Actions:
    return Actions(str(repo.gitops), lambda: LocalForge(repo.gitops), runtime=lambda: runtime,
                   poll=0.01)


# -- the actions ---------------------------------------------------------------------------


def test_a_version_not_ready_comes_back_at_0_and_takes_the_traffic_once_ready(promoted):
    assert _deployments(promoted) == ["deployment-v2.yaml"]
    gate = Gate()
    actions = _actions(promoted, Runtime(gate, "local"))
    answer = actions.rollback("det", "Grace")
    assert isinstance(answer, Pending), answer
    assert "rollback(det): bring v1 back before it takes traffic (v2 serves)" in answer.message
    assert "v1 takes the traffic once local says it is ready (up to 300s)" in answer.message
    # commit 1 only: v1 runs again at 0 %, v2 keeps the traffic
    assert _decisions(promoted, 1) == ["restore/human"]
    assert promoted.state().stable == "v2"
    assert _deployments(promoted) == ["deployment-v1.yaml", "deployment-v2.yaml"]
    assert actions.rollbacks["det"].view()["state"] == "waiting"
    # a second press while it waits: refused, with the reason
    with pytest.raises(MlopsError) as busy:
        actions.rollback("det", "Linus")
    assert http_status(busy.value) == 409
    assert "det: a rollback to v1 by Grace is under way" in str(busy.value)
    gate.open.set()
    job = actions.join("det", timeout=120)
    assert job is not None and job.state == "done", job and job.lines
    assert _decisions(promoted, 2) == ["restore/human", "rollback/human"]
    assert promoted.state().stable == "v1"
    assert "v1 is stable at 100% (was v2)" in job.view()["message"]
    assert "ready before it took the traffic: det v1: 1/1 ready (stand-in)" in \
        job.view()["message"]


def test_a_version_that_cannot_become_ready_leaves_the_traffic_and_says_why(promoted):
    actions = _actions(promoted, Runtime(Gate(lasting=NEVER), "local"))
    with pytest.raises(MlopsError) as failed:
        actions.rollback("det", "Grace")
    text = str(failed.value)
    assert http_status(failed.value) == 409
    assert text.startswith(f"det: v1 cannot become ready: {NEVER}; the traffic did not move, "
                           "v2 still serves")
    assert "run `mlops rollback det --to v1` again once it is ready" in text
    assert _decisions(promoted, 1) == ["restore/human"]  # commit 1 only
    assert promoted.state().stable == "v2"
    assert actions.rollbacks["det"].view()["state"] == "failed"
    # not busy any more: the person may press again
    with pytest.raises(MlopsError, match="cannot become ready"):
        actions.rollback("det", "Grace")


def test_without_a_runtime_it_is_one_commit_and_the_answer_says_so(promoted):
    note = "readiness not checked (runtime none): stand-in note"
    actions = _actions(promoted, Runtime(None, "none", note))
    answer = actions.rollback("det", "Grace")
    assert isinstance(answer, str) and answer.endswith(f"note: {note}")
    assert _decisions(promoted, 2) == ["promote/analysis", "rollback/human"]
    assert promoted.state().stable == "v1"


def test_the_ui_asks_the_runtime_the_cli_would(promoted, tmp_path, monkeypatch):
    """`UiEndpoints.readiness`: none says why; local reads the platform's work dir;
    kubernetes asks the namespace of the repo's mlops-gitops.yaml, through the kubeconfig
    (here one naming an address nothing listens on: nothing is asked yet), and with no
    kubeconfig at all it says it could not ask instead of failing the button.

    The client reads $KUBECONFIG once, when `kubernetes.config.kube_config` is imported
    (`KUBE_CONFIG_DEFAULT_LOCATION`, kubernetes-client/python
    kubernetes/base/config/kube_config.py), so the test sets that name, not the variable."""
    from kubernetes.config import kube_config

    def runtime(**kw) -> Runtime:
        return UiEndpoints(UiConfig(gitops=str(promoted.gitops), **kw)).readiness()

    none = runtime()
    assert none.check is None and none.note.startswith("readiness not checked (runtime none)")
    local = runtime(workdir=tmp_path / "platform")
    assert type(local.check).__name__ == "PlatformReadiness" and local.name == "local"
    assert local.check.workdir.root == tmp_path / "platform"
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n")
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(config))
    cluster = runtime(runtime="kubernetes")
    assert isinstance(cluster.check, KubernetesReadiness) and cluster.name == "kubernetes"
    assert cluster.check.namespace == "models"
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    unreachable = runtime(runtime="kubernetes")
    assert unreachable.check is None
    assert unreachable.note.startswith("readiness not checked: the kubernetes runtime could "
                                       "not be asked (")


# -- through the app ------------------------------------------------------------------------


def test_the_button_makes_two_commits_in_order_and_the_page_follows(promoted):
    gate = Gate()
    app = create_app(UiConfig(gitops=str(promoted.gitops), user="ada", readiness=gate))
    with TestClient(app) as client:
        res = client.post("/api/models/det/rollback", json={"by": "Grace"}, headers=HEADERS)
        assert res.status_code == 202, res.text
        assert res.json()["pending"] is True
        assert "bring v1 back before it takes traffic" in res.json()["message"]
        det = next(m for m in client.get("/api/models").json()["models"] if m["name"] == "det")
        assert det["rollback"]["state"] == "waiting" and det["rollback"]["to"] == "v1"
        assert det["canary"]["stable"] == "v2"
        again = client.post("/api/models/det/rollback", json={"by": "Linus"}, headers=HEADERS)
        assert again.status_code == 409
        assert "a rollback to v1 by Grace is under way" in again.json()["error"]
        gate.open.set()
        job = app.state.actions.join("det", timeout=120)
        assert job is not None and job.state == "done", job and job.lines
        det = next(m for m in client.get("/api/models").json()["models"] if m["name"] == "det")
        assert det["rollback"]["state"] == "done" and det["canary"]["stable"] == "v1"
    assert _decisions(promoted, 3) == ["promote/analysis", "restore/human", "rollback/human"]


def test_the_button_on_a_version_that_cannot_be_ready_is_a_409_and_one_commit(promoted):
    app = create_app(UiConfig(gitops=str(promoted.gitops), user="ada",
                              readiness=Gate(lasting=NEVER)))
    with TestClient(app) as client:
        res = client.post("/api/models/det/rollback", json={"by": "Grace"}, headers=HEADERS)
        assert res.status_code == 409 and "Traceback" not in res.text
        assert res.json()["error"].startswith(f"det: v1 cannot become ready: {NEVER}; the "
                                              "traffic did not move, v2 still serves")
        det = next(m for m in client.get("/api/models").json()["models"] if m["name"] == "det")
        assert det["rollback"]["state"] == "failed" and det["canary"]["stable"] == "v2"
    assert _decisions(promoted, 2) == ["promote/analysis", "restore/human"]
