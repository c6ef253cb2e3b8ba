"""SIGKILL the controller mid-canary, start it again: no step repeated, none skipped.

The controller runs as a real subprocess on the real clock (1 s windows) over
a real bare GitOps repo. Its metric source is the scripted `RouterStub`
(tests/fixtures/promotion_controller.py), which answers from the weights on
main -- legitimate because the decision and the Prometheus source are tested
against a real Prometheus elsewhere; this test is about the process dying.
"""

from __future__ import annotations

import logging
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

from promotion.controller import Controller, ControllerConfig
from tests.fixtures.common import ROOT
from tests.fixtures.promotion_controller import RouterStub, decision_log, main_state, merge_to_main

POLICY = {"steps": [10, 25, 50, 100], "interval": "1s", "min_requests": 40}


def child(repo: str, workdir: str) -> None:
    """The controller process: real loop, scripted metric source (60 requests/s: 40 canary
    requests take 7 windows at 10 %, then holds at 25 % while the test kills it)."""

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    source = RouterStub(pathlib.Path(repo), rate=60.0)
    controller = Controller(ControllerConfig(repo=repo, workdir=pathlib.Path(workdir)), source)
    controller.run(threading.Event(), poll=0.2)


def _start(repo: pathlib.Path, workdir: pathlib.Path, log: pathlib.Path) -> subprocess.Popen:
    code = ("import sys; from tests.promotion.test_promotion_controller_restart import child; "
            "child(sys.argv[1], sys.argv[2])")
    return subprocess.Popen([sys.executable, "-c", code, str(repo), str(workdir)], cwd=ROOT,
                            stdout=log.open("a"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _wait_for(predicate, timeout: float, proc: subprocess.Popen, log: pathlib.Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"controller exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"timed out; controller log:\n{log.read_text()[-3000:]}")


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def test_sigkill_mid_canary_then_restart_continues(promotion_repo, tmp_path):
    merge_to_main(promotion_repo, "v2", POLICY)
    log = tmp_path / "controller.log"
    work = tmp_path / "work"  # the same work dir: caches and timeline survive, state does not
    proc = _start(promotion_repo, work, log)
    try:
        _wait_for(lambda: len(decision_log(promotion_repo)) >= 1, 120, proc, log)
        time.sleep(1.5)  # a hold or two at 25 %, only in memory
        steps_at_kill = [c["Mlops-Step"] for c in decision_log(promotion_repo)]
        _kill(proc)
        log.write_text(log.read_text() + "\n--- SIGKILL ---\n")
        assert main_state(promotion_repo)["phase"] == "progressing"

        proc = _start(promotion_repo, work, log)
        _wait_for(lambda: main_state(promotion_repo)["phase"] == "promoted", 120, proc, log)
    finally:
        _kill(proc)

    history = decision_log(promotion_repo)
    assert [c["Mlops-Step"] for c in history] == ["10->25", "25->50", "50->100", "100->100"]
    assert steps_at_kill == [c["Mlops-Step"] for c in history][:len(steps_at_kill)]
    windows = [c["Mlops-Window"] for c in history]
    assert windows == sorted(set(windows))
    assert main_state(promotion_repo)["stable"] == "v2"
    assert "--- SIGKILL ---" in log.read_text()
