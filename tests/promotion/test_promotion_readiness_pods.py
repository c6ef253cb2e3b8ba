"""In a cluster, a server that exited CANNOT_SERVE on a retry ends the rollout at once.

`mlops serve --termination-log` (the serving Deployment passes it) writes why its
warm-up failed to the container's termination message file and exits 9; the kubelet
restarts it and reports `lastState.terminated {exitCode, message}` and `restartCount`
(kubernetes/kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go: a new
container's count is the previous one's plus one, and `getTerminationMessage` reads
the file; kubernetes/website content/en/docs/tasks/debug/debug-application/
determine-reason-pod-failure.md). The pure half over pod JSON as the API server
returns it; `KubernetesReadiness` and the controller against the recording
stand-in API server (tests/fixtures/kubeapi.py: no Kubernetes API server runs here).
"""

from __future__ import annotations

import copy
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from promotion.cluster.readiness import KubernetesReadiness, pods_lasting_failure
from promotion.controller import Controller, ControllerConfig
from serving.manifests import ANNOTATION_WEIGHTS_SHA256
from tests.fixtures.kubeapi import api_stand_in
from tests.fixtures.promotion_controller import (
    MODEL,
    TEST_POLICY,
    Clock,
    RouterStub,
    git,
    main_state,
    merge_to_main,
)

DIGEST = "b" * 64
WHY = ("warm-up inference failed: inference failed: InvalidArgumentError: The 'shape' "
       "attribute in ReshapeOp is invalid")
ENDED = {"exitCode": 9, "reason": "Error", "message": WHY}
RUNNING = {"running": {"startedAt": "2026-11-28T12:00:00Z"}}
BACKOFF = {"waiting": {"reason": "CrashLoopBackOff"}}


def _pod(state, last=None, restarts=0, digest=DIGEST, name="shapes-v2-7d9f-x2", **meta):
    return {"metadata": {"name": name, "annotations": {ANNOTATION_WEIGHTS_SHA256: digest},
                         **meta},
            "status": {"containerStatuses": [{
                "name": "server", "ready": False, "restartCount": restarts, "state": state,
                "lastState": {"terminated": last} if last else {}}]}}


def _list(*pods):
    return {"kind": "PodList", "apiVersion": "v1", "items": list(pods)}


@pytest.mark.parametrize("pod", [
    _pod(RUNNING),  # loading
    _pod({"terminated": ENDED}),  # the first run ended: the kubelet retries it once
    _pod(BACKOFF, ENDED, restarts=0),  # the first run ended, waiting for its retry
    _pod(RUNNING, ENDED, restarts=1),  # the retry is loading
    _pod(BACKOFF, {**ENDED, "exitCode": 1}, restarts=3),  # another failure: the deadline's
    _pod(BACKOFF, {"exitCode": 137, "reason": "OOMKilled"}, restarts=2),
    _pod(BACKOFF, ENDED, restarts=1, digest="c" * 64),  # an older template's pod
    _pod(BACKOFF, ENDED, restarts=1, deletionTimestamp="2026-11-28T12:00:00Z"),
])
def test_a_first_exit_or_another_failure_is_not_lasting(pod):
    assert pods_lasting_failure(_list(pod), "shapes-v2", DIGEST) is None


@pytest.mark.parametrize("pod, runs", [
    (_pod(BACKOFF, ENDED, restarts=1), 2),  # the retry ended 9 too: CrashLoopBackOff
    (_pod({"terminated": ENDED}, ENDED, restarts=1), 2),  # the retry just ended
    (_pod(RUNNING, ENDED, restarts=2), 2),  # a third try loading: two ended 9
])
def test_an_exit_9_on_a_retry_is_lasting_with_the_servers_words(pod, runs):
    answer = pods_lasting_failure(_list(_pod(RUNNING, name="other"), pod),
                                  "shapes-v2", DIGEST)
    assert answer is not None and answer.lasting and not answer.ready
    assert answer.reason == (f"deployment shapes-v2: pod shapes-v2-7d9f-x2 cannot serve "
                             f"({runs} runs): {WHY}")


def test_without_a_message_or_a_digest_the_exit_code_says_it():
    pod = _pod(BACKOFF, {"exitCode": 9, "reason": "Error"}, restarts=4)
    answer = pods_lasting_failure(_list(pod), "shapes-v2")
    assert answer is not None and answer.lasting
    assert answer.reason.endswith("(5 runs): its server exited 9 (cannot serve)")
    assert pods_lasting_failure(None, "shapes-v2") is None
    assert pods_lasting_failure({"items": None}, "shapes-v2") is None


def _deployment(desired, available=0):
    """The live Deployment: git's, its pods not available (yet)."""
    live = copy.deepcopy(desired)
    live["metadata"]["generation"] = 1
    live["status"] = {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                      "availableReplicas": available}
    return live


def _cluster(desired, pods):
    """The stand-in's answers: the Deployment, and `pods[0]` for a list of its pods."""

    def answer(method, path, body, before):
        split = urlsplit(path)
        if split.path.endswith("/deployments/shapes-v2"):
            return 200, _deployment(desired)
        if split.path == "/api/v1/namespaces/models/pods":
            selector = parse_qs(split.query).get("labelSelector", [""])[0]
            assert sorted(selector.split(",")) == ["app=shapes", "version=v2"], selector
            return pods[0]
        return 404, {"kind": "Status", "code": 404, "reason": "NotFound"}

    return answer


def _readiness(url):
    # lazy (collection cost): kubernetes loads only when this runs
    from kubernetes import client

    return KubernetesReadiness("models", api_client=client.ApiClient(
        client.Configuration(host=url)))


def _git_deployment(repo):
    return yaml.safe_load(git(repo, "show", f"main:apps/{MODEL}/deployment-v2.yaml"))


def test_the_kubernetes_backend_reads_the_deployments_pods(promotion_repo):
    merge_to_main(promotion_repo, "v2", TEST_POLICY, ready=False)
    desired = _git_deployment(promotion_repo)
    digest = desired["spec"]["template"]["metadata"]["annotations"][ANNOTATION_WEIGHTS_SHA256]
    pods = [(200, _list(_pod(BACKOFF, ENDED, restarts=0, digest=digest)))]
    with api_stand_in(_cluster(desired, pods)) as (url, seen):
        readiness = _readiness(url)
        first = readiness.check(MODEL, "v2", desired)  # one exit: the retry may yet serve
        assert not first.ready and not first.lasting
        assert first.reason == "deployment shapes-v2: 0 of 1 replicas ready"
        pods[0] = (403, {"kind": "Status", "code": 403, "reason": "Forbidden"})
        denied = readiness.check(MODEL, "v2", desired)  # a Role without `list` on pods
        assert not denied.lasting and "(its pods: API error 403 Forbidden)" in denied.reason
        pods[0] = (200, _list(_pod(BACKOFF, ENDED, restarts=1, digest=digest)))
        second = readiness.check(MODEL, "v2", desired)
    assert second.lasting and not second.ready and second.reason.endswith(WHY)
    assert [m for m, _, _ in seen] == ["GET"] * 6


def test_the_controller_rolls_back_at_the_retrys_exit_not_at_the_deadline(tmp_path,
                                                                          promotion_repo):
    """What the cluster gets: the Deployment never available, its pod exiting 9. The
    first exit is waited out; the retry's ends the rollout on the next pass, with the
    server's words in the commit, long before progressDeadlineSeconds."""
    merge_to_main(promotion_repo, "v2", TEST_POLICY, ready=False)
    desired = _git_deployment(promotion_repo)
    digest = desired["spec"]["template"]["metadata"]["annotations"][ANNOTATION_WEIGHTS_SHA256]
    pods = [(200, _list(_pod(BACKOFF, ENDED, restarts=0, digest=digest)))]
    merged = float(git(promotion_repo, "log", "-1", "--format=%ct", "main").strip())
    with api_stand_in(_cluster(desired, pods)) as (url, _):
        clock = Clock(merged)
        controller = Controller(
            ControllerConfig(repo=str(promotion_repo), workdir=tmp_path / "w"),
            RouterStub(promotion_repo), clock=clock, readiness=_readiness(url))
        before = git(promotion_repo, "rev-parse", "main")
        for _ in range(5):
            clock.advance(1.0)
            controller.tick()
        assert git(promotion_repo, "rev-parse", "main") == before  # waits out one exit
        pods[0] = (200, _list(_pod(BACKOFF, ENDED, restarts=1, digest=digest)))
        clock.advance(1.0)
        outcomes = controller.tick()
        controller.close()
    assert [(o.kind, o.cause) for o in outcomes] == [("rollback", "not-ready")]
    assert main_state(promotion_repo)["phase"] == "rolled_back"
    message = git(promotion_repo, "log", "-1", "--format=%B", "main")
    reason = next(line for line in message.splitlines() if line.startswith("Mlops-Reason:"))
    assert "cannot become ready: deployment shapes-v2: pod shapes-v2-7d9f-x2 cannot " \
           "serve (2 runs): warm-up inference failed" in reason
    assert "rolled back after 6s" in reason, reason
