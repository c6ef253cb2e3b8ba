"""`mlops up` / `status` / `down` with real Prometheus, HAProxy and git (no model servers).

The GitOps repo is a real bare repo made by ``platform_gitops`` (with the GitOps
room's `init_repo`); with no model in it the sync has nothing to start, which keeps
these tests to a few seconds.
"""

import json
import os
import signal
import subprocess
import sys

import pytest
import requests

from cogs.files import read_json
from local.platform import lifecycle, procs
from local.platform.workdir import Workdir
from mlops import cli
from tests.fixtures.platform import teardown, wait_for, write_model


def test_up_status_down_leaves_no_process(platform_gitops, tmp_path, capsys):
    """`mlops up` as a user runs it: the command returns, the platform keeps running."""
    wd = Workdir(tmp_path / "platform")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mlops", "up", "--workdir", str(wd.root),
             "--gitops", str(platform_gitops)],
            capture_output=True, text=True, timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "started: prometheus, haproxy, sync" in done.stdout
        check_up_status_down(wd, platform_gitops, capsys)
    finally:
        teardown([wd])


def check_up_status_down(wd, platform_gitops, capsys):
    pids = {name: procs.read_record(wd.pidfile(name)).pid for name in lifecycle.SERVICES}
    assert all(procs.is_running(pid) for pid in pids.values())
    config = read_json(wd.config)

    # Prometheus is up and scrapes HAProxy's built-in exporter.
    prom = f"http://127.0.0.1:{config['prometheus_port']}"
    def haproxy_scraped():
        r = requests.get(f"{prom}/api/v1/query", params={"query": 'up{job="haproxy"}'}, timeout=2)
        result = r.json()["data"]["result"]
        return result and result[0]["value"][1] == "1"
    wait_for(haproxy_scraped, 20, "Prometheus to scrape HAProxy")
    stats = requests.get(f"http://127.0.0.1:{config['haproxy_stats_port']}/stats", timeout=2)
    assert stats.status_code == 200

    # The sync read the repo: it records the applied commit.
    from tests.fixtures.gitops import head
    wait_for(lambda: read_json(wd.status, {}).get("applied_commit") == head(platform_gitops), 10,
             "the sync to record the GitOps head")

    assert cli.main(["status", "--workdir", str(wd.root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert all(svc["running"] for svc in doc["services"].values())
    assert doc["applied_commit"] == head(platform_gitops)
    assert doc["urls"]["prometheus"] == prom
    assert doc["urls"]["haproxy_stats"].endswith("/stats")
    assert doc["pull_requests"] == []  # the local forge's open PRs

    assert cli.main(["status", "--workdir", str(wd.root)]) == 0
    text = capsys.readouterr().out
    assert "sync:" in text and "running" in text and prom in text

    assert cli.main(["down", "--workdir", str(wd.root)]) == 0
    assert "prometheus" in capsys.readouterr().out
    assert not any(procs.is_running(pid) for pid in pids.values())
    assert procs.processes_of(str(wd.root)) == []
    assert not list(wd.run.glob("*.json"))

    # Status after down says so instead of failing.
    assert cli.main(["status", "--workdir", str(wd.root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not any(svc["running"] for svc in doc["services"].values())


def test_second_up_reuses_running_processes(platform_gitops, platform_factory):
    wd = platform_factory(platform_gitops)
    before = {name: procs.read_record(wd.pidfile(name)) for name in lifecycle.SERVICES}
    again = lifecycle.up(wd)  # no --gitops needed the second time
    assert again["started"] == []
    assert sorted(again["reused"]) == sorted(lifecycle.SERVICES)
    after = {name: procs.read_record(wd.pidfile(name)) for name in lifecycle.SERVICES}
    assert before == after

    # A dead sync is restarted alone; the others stay the same processes.
    assert procs.stop(before["sync"])
    third = lifecycle.up(wd)
    assert third["started"] == ["sync"]
    assert procs.read_record(wd.pidfile("haproxy")) == before["haproxy"]
    assert procs.read_record(wd.pidfile("prometheus")) == before["prometheus"]
    assert procs.read_record(wd.pidfile("sync")).pid != before["sync"].pid


def test_sync_restarts_dead_prometheus_and_haproxy(platform_gitops, platform_factory):
    wd = platform_factory(platform_gitops)
    for name in ("haproxy", "prometheus"):
        old = procs.read_record(wd.pidfile(name))
        os.kill(old.pid, signal.SIGKILL)
        wait_for(lambda: (read_json(wd.status, {}).get("service_restarts") or {}).get(name) == 1,
                 40, f"the sync to restart {name}")
        new = procs.read_record(wd.pidfile(name))
        assert new.pid != old.pid and procs.record_alive(new)
    config = read_json(wd.config)
    wait_for(lambda: requests.get(f"http://127.0.0.1:{config['prometheus_port']}/-/ready",
                                  timeout=2).ok, 20, "prometheus ready")
    assert requests.get(f"http://127.0.0.1:{config['haproxy_stats_port']}/stats", timeout=2).ok


def test_up_refuses_another_repo_while_running(platform_gitops, platform_factory, tmp_path):
    wd = platform_factory(platform_gitops)
    with pytest.raises(lifecycle.PlatformError, match="mlops down"):
        lifecycle.up(wd, str(tmp_path / "other.git"))


def test_missing_binaries_say_what_to_install(tmp_path, capsys, monkeypatch):
    """A PATH without prometheus and haproxy stands in for a machine without the packages."""
    empty = tmp_path / "bin"
    empty.mkdir()
    (empty / "git").symlink_to("/usr/bin/git")
    monkeypatch.setenv("PATH", str(empty))
    from local.platform import binaries
    monkeypatch.setattr(binaries, "_EXTRA_DIRS", ())
    code = cli.main(["up", "--workdir", str(tmp_path / "wd"), "--gitops", str(tmp_path / "g.git")])
    err = capsys.readouterr().err
    assert code == 2
    assert "prometheus, haproxy not found" in err
    assert "apt-get install prometheus haproxy" in err
    assert "Traceback" not in err
    assert not (tmp_path / "wd" / "run").exists()


def test_first_up_needs_a_platform_gitops(tmp_path, capsys):
    code = cli.main(["up", "--workdir", str(tmp_path / "wd")])
    assert code == 2
    assert "--gitops" in capsys.readouterr().err


def test_status_without_platform_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["status", "--workdir", str(tmp_path / "nothing")]) == 2
    assert "mlops up" in capsys.readouterr().err


def test_server_that_cannot_start_is_retried_with_backoff(
    platform_gitops, platform_factory, tmp_path, capsys
):
    """A Deployment naming a missing model dir: the server exits, the sync retries, status
    says so."""
    wd = platform_factory(platform_gitops)
    missing = tmp_path / "no-such-model"
    missing.mkdir()
    (missing / "inference.pdiparams").write_bytes(b"not a model")
    write_model(platform_gitops, "broken-model", {"v1": missing}, stable="v1")

    def retried():
        info = (read_json(wd.status, {}).get("models") or {}).get("broken-model", {})
        v1 = info.get("versions", {}).get("v1", {})
        return v1.get("restarts", 0) >= 2 and v1.get("last_exit", "").startswith("exit code")
    wait_for(retried, 90, "two restarts of the failing server")
    assert cli.main(["status", "--workdir", str(wd.root)]) == 0
    out = capsys.readouterr().out
    assert "last exit: exit code" in out and "broken-model-v1.log" in out
    # It never got a route: HAProxy has the backend but no server taking traffic.
    info = read_json(wd.status)["models"]["broken-model"]["versions"]["v1"]
    assert info["haproxy_weight"] in (None, 0)
