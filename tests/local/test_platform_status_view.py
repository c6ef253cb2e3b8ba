"""`mlops status` says what an operator must act on: a refused commit, a crash-looping
server with its last error, and main's tip when it is ahead of what is applied.

The document is the one `lifecycle.status` returns (its fields come from the sync's
status.json, written by the real sync in tests/local/test_platform_e2e.py); here the view is
checked on each case without starting a platform.
"""

from __future__ import annotations

import pytest

from local.platform import lifecycle
from mlops import cli

BASE = {
    "workdir": "/w", "gitops": "/g.git", "branch": "main", "sync_fresh": True,
    "services": {"sync": {"running": True, "pid": 1}},
    "urls": {"prometheus": "http://p", "haproxy_stats": "http://h"},
    "applied_commit": "a" * 40, "seen_commit": "a" * 40, "tip_commit": "a" * 40,
    "sync_delay": 0, "errors": [], "git_error": None, "models": {}, "pull_requests": [],
}


def _status(monkeypatch, capsys, **changes) -> str:
    monkeypatch.setattr(lifecycle, "status", lambda wd: {**BASE, **changes})
    assert cli.main(["status", "--workdir", "/w"]) == 0
    return capsys.readouterr().out


def test_a_refused_commit_is_named(monkeypatch, capsys):
    out = _status(monkeypatch, capsys, seen_commit="b" * 40, tip_commit="b" * 40, errors=[
        {"file": "apps/m/virtualservice.yaml", "model": "m", "message": "weights sum to 150"}])
    assert "newest seen bbbbbbbbbbbb is REFUSED" in out
    assert "ERROR apps/m/virtualservice.yaml: weights sum to 150" in out


def test_a_tip_held_back_by_the_sync_delay_is_shown(monkeypatch, capsys):
    out = _status(monkeypatch, capsys, tip_commit="c" * 40, sync_delay=180)
    assert "main's tip: cccccccccccc  (not applied yet" in out and "180 s" in out


@pytest.mark.parametrize("restarts, marked", [(1, False), (3, True)])
def test_a_crash_loop_is_marked_with_its_last_error(monkeypatch, capsys, restarts, marked):
    version = {"desired_weight": 10, "haproxy_weight": 0, "phase": "starting", "ready": False,
               "haproxy_up": False, "pid": None, "port": None, "restarts": restarts,
               "last_exit": "exit code 1: weights sha256 mismatch", "log": "/w/logs/m-v2.log"}
    out = _status(monkeypatch, capsys, models={"m": {"url": "http://m", "versions": {
        "v2": version}}})
    assert "last exit: exit code 1: weights sha256 mismatch" in out
    assert ("CRASH LOOP" in out) is marked


def test_make_before_break_is_shown_while_it_holds(monkeypatch, capsys):
    """A version git no longer has that still serves (its replacement is starting), and a
    changed pod's new process starting beside the one that serves (issue 43)."""
    common = {"ready": True, "haproxy_up": True, "pid": 7, "restarts": 0, "phase": "ready"}
    out = _status(monkeypatch, capsys, models={"m": {"url": "http://m", "versions": {
        "v1": {**common, "desired_weight": 100, "haproxy_weight": 0, "phase": "starting",
               "ready": False, "port": 8001,
               "successor": {"phase": "starting", "port": 8003, "not_ready_reason": None}},
        "v2": {**common, "desired_weight": None, "haproxy_weight": 100, "port": 8002}}}})
    assert "serving until a version of the new split is ready (make-before-break)" in out
    assert "new pod starting on port 8003" in out
