"""`mlops up` / `status` / `down` with real Prometheus, HAProxy and git (no model servers).

The GitOps repo is a real bare repo made by ``platform_gitops`` (with the GitOps
room's `init_repo`); with no model in it the sync has nothing to start, which keeps
these tests to a few seconds.
"""

import json
import os
import signal

import pytest
import requests

from mlops import cli
from mlops.platform import lifecycle, procs
from mlops.platform.files import read_json
from tests.fixtures.platform import wait_for


def test_up_status_down_leaves_no_process(platform_gitops, platform_factory, capsys):
    wd = platform_factory(platform_gitops)
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
    from mlops.platform import binaries
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
