"""The canary under cluster delays, on this machine: no rollback and no error before it is ready.

In a cluster Argo CD applies a merge up to 3 minutes after it lands (its
default poll), and a new pod needs an image pull and a passing readiness
probe. Before readiness gating the controller rolled a canary back on "no
traffic" 60 s after the merge, and Istio sent 10 % of the requests to a
subset with no ready endpoints (503s). Here the local platform runs in
cluster-latency mode (`mlops up --sync-delay --start-delay`), with a sync
delay well above the policy's no-traffic grace, under a steady load through
HAProxy; the controller reads readiness from the platform (`--readiness
local`, the stand-in for the Kubernetes API). Everything is real: git,
Prometheus, HAProxy, the sync, `mlops serve`, `mlops load`, the controller.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from cogs.files import read_json
from gitops.forges.local import LocalForge
from gitops.repo import init_repo
from promotion.decision.policy import load_policy
from promotion.gitrepo.propose import propose
from tests.fixtures.common import ROOT, free_port
from tests.fixtures.platform import converged, status_doc, wait_for
from tests.fixtures.promotion_controller import decision_log, git
from tests.promotion.test_promotion_controller_e2e import MODEL, SERVER_READY, _version_dir
from tests.promotion.test_promotion_controller_e2e import POLICY as E2E_POLICY

pytestmark = pytest.mark.slow

# The controller e2e's policy with its earlier, longer windows: at 2 s windows and 40
# requests/s this test's clients saw 503s around the sync's delayed applies on a busy machine
POLICY = {**E2E_POLICY, "interval": "4s",
          "quality": {"class_mix": {"min_ratio": 3.0, "min_difference": 0.3}}}

# Argo CD's 3-minute poll scaled down: what matters is the order of the three, and each
# canary step waits one sync delay, so every second here costs about four in the test.
# The canary is not ready for at least SYNC_DELAY + START_DELAY = 16 s after its merge; a
# controller without readiness gating would have rolled it back within ~6 s at this load
# (the grace passed, and the 20 stable requests that make "no traffic" certain at 50 %),
# and even at a 10 % step within ~14 s (131 requests: three 4 s windows after the settle).
SYNC_DELAY, START_DELAY = 10.0, 6.0
GRACE = 4.0  # the policy's no-traffic grace: well below the sync delay
# Half the traffic once ready, then all of it: a step at 10 % waited 40-80 s here for the
# class mix's canary detections (1.5 requests/s); one delayed step after the first already
# shows that the controller waits for the router to apply it.
STEPS = [50, 100]


def _state(repo):
    return yaml.safe_load(git(repo, "show", f"main:apps/{MODEL}/promotion.yaml"))


def test_no_rollback_and_no_error_before_the_canary_is_ready_then_it_promotes(
        tmp_path, trained_model, shapes_dataset, platform_factory):
    repo = tmp_path / "gitops.git"
    init_repo(repo)
    v1 = _version_dir(trained_model.model_dir, tmp_path / "models" / "v1", "v1")
    v2 = _version_dir(trained_model.model_dir, tmp_path / "models" / "v2", "v2")
    wd = platform_factory(repo, sync_delay=SYNC_DELAY, start_delay=START_DELAY)
    forge = LocalForge(repo)
    policy = load_policy({**POLICY, "no_traffic_grace": f"{GRACE:g}s", "steps": STEPS})
    propose(v1, str(repo), forge, policy, approval="auto")
    wait_for(lambda: converged(wd, MODEL, {"v1": 100}), SYNC_DELAY + SERVER_READY, "v1 to serve")
    url = status_doc(wd)["models"][MODEL]["url"]
    prometheus = f"http://127.0.0.1:{read_json(wd.config)['prometheus_port']}"

    load_report = tmp_path / "load.json"
    log = tmp_path / "controller.log"
    load = controller = None
    try:
        load = subprocess.Popen(
            [sys.executable, "-m", "mlops", "load", url, "--rps", "15", "--duration", "1200",
             "--images", str(shapes_dataset / "val"), "--model", MODEL,
             "--json", str(load_report)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        controller = subprocess.Popen(
            [sys.executable, "-m", "mlops", "controller", "run", "--gitops", str(repo),
             "--prometheus", prometheus, "--settle", "2", "--poll", "0.5",
             "--workdir", str(tmp_path / "controller"), "--metrics-port", str(free_port()),
             "--readiness", "local", "--platform-workdir", str(wd.root)],
            cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)

        merged_at = time.time()
        propose(v2, str(repo), forge, policy, approval="auto")
        assert _state(repo)["phase"] == "waiting"

        def phase(name):
            def check():
                if controller.poll() is not None:
                    pytest.fail(f"controller exited:\n{log.read_text()[-3000:]}")
                return _state(repo)["phase"] == name
            return check

        wait_for(phase("progressing"), SYNC_DELAY + SERVER_READY, "the canary to be ready")
        ready_at = time.time()
        # It waited out Argo CD's "poll" (and the start-up), far past the no-traffic grace,
        # and nothing was rolled back meanwhile.
        assert ready_at - merged_at >= SYNC_DELAY + START_DELAY - 2
        assert all(not c["subject"].startswith("rollback(") for c in decision_log(repo))
        ready = git(repo, "log", "-1", "--format=%s%n%(trailers:only,unfold)", "main")
        assert "0% -> 50% (v2 over v1)" in ready and "Mlops-Decision: step/ready" in ready

        wait_for(phase("promoted"), 400, f"v2 to be promoted; see {log}")
        story = [c["subject"] for c in decision_log(repo)]
        assert story[-1] == "promote(shapes-detector): v2 is stable at 100% (replaces v1)", story
        assert not any(s.startswith("rollback(") for s in story)
        wait_for(lambda: converged(wd, MODEL, {"v2": 100}), SYNC_DELAY + 60, "v2 alone at 100")
    finally:
        for proc in (controller, load):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=60)

    # The clients saw no error at all: no request went to a version before it was ready.
    report = json.loads(load_report.read_text())
    codes = report["status_counts"]
    assert set(codes) == {"200"} and codes["200"] > 100, codes
