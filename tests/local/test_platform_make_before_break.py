"""Make-before-break on the local platform, under load: no request is lost while a version starts.

Issue 43 (fault drills at 40 requests/s): `mlops rollback --to` a version that
was not running answered 177 requests with 503, every request for 4.4 s: the
sync removed the serving version from HAProxy 3 ms after it started the
restored one. And a Deployment whose pod template changed had its only server
stopped before the new one was started.

Everything is real: a bare GitOps repo, `mlops up` (Prometheus, HAProxy, the
sync), `mlops serve` on the model the session's `trained_model` fixture trained
(every version is its weights under another name: what is measured here is
routing, not the model), the open-loop load generator (`mlops load`) through
the HAProxy frontend, the controller (in-process, asking the platform's
readiness) for the promotion that stops v1, and `mlops rollback` as a person
types it, in its own process, with `$MLOPS_WORKDIR` naming the platform (as
`mlops up` users have it). Each test counts every answer the clients got.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import yaml

from gitops import layout
from gitops.forges.local import LocalForge
from gitops.repo import init_repo
from gitops.writeback import Message, WriteBack
from local.platform.readiness import PlatformReadiness
from local.platform.workdir import Workdir
from promotion.controller import Controller, ControllerConfig
from promotion.decision.policy import load_policy
from promotion.gitrepo import apply
from promotion.gitrepo.propose import propose
from tests.fixtures.common import ROOT
from tests.fixtures.platform import FAST, converged, status_doc, teardown, versions_of, wait_for
from tests.fixtures.promotion_controller import RouterStub, git
from tests.promotion.test_promotion_controller_e2e import _version_dir

pytestmark = pytest.mark.slow

MODEL = "shapes-detector"
#: Paddle start-up on a busy 2-core machine: load + warm-up, with margin.
SERVER_READY = 240
#: Client load (requests/s) through HAProxy, as in the controller's end-to-end test's
#: drills (fewer: the point is that every one of them is answered).
RPS = 15


def _state(repo: pathlib.Path) -> dict:
    return yaml.safe_load(git(repo, "show", f"main:apps/{MODEL}/promotion.yaml"))


@pytest.fixture(scope="module")
def promoted(tmp_path_factory, trained_model):
    """v1 served at 100 %, then v2 was proposed, given its first step once the platform
    said it was ready, and promoted on a person's request: v1's server is stopped."""
    base = tmp_path_factory.mktemp("make-before-break")
    repo = base / "gitops.git"
    init_repo(repo)
    v1 = _version_dir(trained_model.model_dir, base / "models" / "v1", "v1")
    v2 = _version_dir(trained_model.model_dir, base / "models" / "v2", "v2")
    wd = Workdir(base / "platform")
    forge = LocalForge(repo)
    policy = load_policy({})
    try:
        # lazy (import cost): `mlops up` in-process, as the platform fixture does
        from local.platform import lifecycle

        lifecycle.up(wd, str(repo))
        propose(v1, str(repo), forge, policy, approval="auto")
        wait_for(lambda: converged(wd, MODEL, {"v1": 100}), SERVER_READY, "v1 to serve")
        propose(v2, str(repo), forge, policy, approval="auto")
        controller = Controller(ControllerConfig(repo=str(repo), workdir=base / "controller"),
                                RouterStub(repo), readiness=PlatformReadiness(wd))
        try:
            wait_for(lambda: (controller.tick(), _state(repo)["phase"] == "progressing")[1],
                     SERVER_READY, "v2 ready and at its first step", interval=0.5)
            apply.human_commit(WriteBack(str(repo)), "main", MODEL, "promote", "carol",
                               dt.datetime.now(dt.timezone.utc))
            controller.tick()
        finally:
            controller.close()
        assert (_state(repo)["phase"], _state(repo)["stable"]) == ("promoted", "v2")
        wait_for(lambda: converged(wd, MODEL, {"v2": 100}), SERVER_READY, "v2 alone at 100")
        yield {"repo": repo, "wd": wd, "base": base}
    finally:
        teardown([wd])


class Load:
    """`mlops load` through the model's HAProxy frontend until stopped; its report after."""

    def __init__(self, wd: Workdir, images: pathlib.Path, report: pathlib.Path) -> None:
        self.report = report
        url = status_doc(wd)["models"][MODEL]["url"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlops", "load", url, "--rps", str(RPS), "--duration", "900",
             "--images", str(images), "--model", MODEL, "--json", str(report)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)

    def stop(self) -> dict[str, int]:
        """Every answer the clients got, by status ("error": no HTTP answer at all)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)
        return json.loads(self.report.read_text())["status_counts"]


def test_rollback_to_a_stopped_version_loses_no_request(promoted, shapes_dataset, tmp_path):
    repo, wd = promoted["repo"], promoted["wd"]
    assert "v1" not in versions_of(wd, MODEL)  # not running: its Deployment left with v2
    before = git(repo, "rev-parse", "main").strip()
    load = Load(wd, shapes_dataset / "val", tmp_path / "load.json")
    try:
        time.sleep(3)  # clients in full flow before the rollback
        env = {**os.environ, "MLOPS_WORKDIR": str(wd.root)}  # how `mlops up` users run it
        done = subprocess.run([sys.executable, "-m", "mlops", "rollback", MODEL, "--to", "v1",
                               "--gitops", str(repo), "--by", "dan"],
                              cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=SERVER_READY + 60)
        assert done.returncode == 0, (done.stdout, done.stderr)
        wait_for(lambda: converged(wd, MODEL, {"v1": 100}), SERVER_READY, "v1 alone at 100")
        time.sleep(2)  # and a little more traffic on v1 alone
    finally:
        codes = load.stop()
    # Every request answered 200, through the start of v1 and the end of v2.
    assert set(codes) == {"200"} and codes["200"] > RPS * 5, codes
    subjects = git(repo, "log", "--format=%s", f"{before}..main").splitlines()
    assert subjects == ["rollback(shapes-detector): v1 is stable at 100% (was v2)",
                        "rollback(shapes-detector): bring v1 back before it takes traffic "
                        "(v2 serves)"], subjects
    assert "readiness: local" in done.stdout
    assert "ready before it took the traffic: shapes-detector v1 ready on port" in done.stdout


def test_a_changed_pod_is_replaced_without_losing_a_request(promoted, shapes_dataset, tmp_path):
    """The rendered Deployment says `maxUnavailable: 0, maxSurge: 1`: the new pod starts
    beside the old one, which stops only once HAProxy sends the new one the traffic."""
    repo, wd = promoted["repo"], promoted["wd"]
    stable = _state(repo)["stable"]
    wait_for(lambda: converged(wd, MODEL, {stable: 100}), SERVER_READY, f"{stable} at 100")
    old = versions_of(wd, MODEL)[stable]
    load = Load(wd, shapes_dataset / "val", tmp_path / "load.json")
    try:
        time.sleep(3)

        def more_in_flight(root: pathlib.Path) -> None:
            doc = layout.read_model(root, MODEL).deployments[stable]
            doc["spec"]["template"]["spec"]["containers"][0]["args"] += ["--max-in-flight", "7"]
            layout.write_model(root, MODEL, [doc])

        WriteBack(str(repo), backoff=FAST).commit(
            "main", more_in_flight, Message(f"ops({MODEL}): {stable} takes 7 requests at once"))

        def replaced():
            info = versions_of(wd, MODEL).get(stable) or {}
            return (info.get("pid") not in (None, old["pid"]) and info.get("ready")
                    and not info.get("successor") and info)
        new = wait_for(replaced, SERVER_READY, f"{stable}'s new pod to take over")
        time.sleep(2)
    finally:
        codes = load.stop()
    assert set(codes) == {"200"} and codes["200"] > RPS * 5, codes
    assert new["port"] != old["port"]  # a second process, beside the first
    argv = pathlib.Path(f"/proc/{new['pid']}/cmdline").read_bytes().decode().split("\0")
    assert argv[argv.index("--max-in-flight") + 1] == "7"
    assert not pathlib.Path(f"/proc/{old['pid']}").exists()  # the old pod is gone
