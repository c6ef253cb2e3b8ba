"""`mlops up`, `mlops down`, `mlops status`: start, stop and read the platform.

``up`` is idempotent: each of Prometheus, HAProxy and the sync is started
only if its pid file does not name a live process, and ports chosen on the
first run are kept (a port taken by someone else meanwhile is replaced).
``down`` stops the sync first (so it restarts nothing), then the model
servers, HAProxy and Prometheus together, each by process group, then any
process still carrying the work dir's marker in its environment
(:data:`procs.MARKER`), and fails loudly if one survives.
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import signal
import sys
import time
from typing import Any

from cogs.files import read_json
from gitops.git import remote
from local.platform import binaries, haproxy, procs, prometheus
from local.platform.haproxy import RuntimeApi
from local.platform.services import (
    PlatformError,
    start_lock,
    wait_ready,
)
from local.platform.workdir import (
    Workdir,
    load_config,
    resolve_config,
    save_config,
    with_free_ports,
)

SERVICES = ("prometheus", "haproxy", "sync")


def _alive(workdir: Workdir, name: str) -> procs.ProcRecord | None:
    record = procs.read_record(workdir.pidfile(name))
    return record if record is not None and procs.record_alive(record) else None


def up(
    workdir: Workdir,
    gitops: str | None = None,
    *,
    controller_port: int | None = None,
    poll_interval: float | None = None,
    sync_delay: float | None = None,
    start_delay: float | None = None,
    path: str | None = None,
) -> dict[str, Any]:
    """Start what is not running; return a summary (what started, what was reused)."""
    found = binaries.require(path)
    credentials = remote(gitops).env if gitops else {}
    running = {name: _alive(workdir, name) for name in SERVICES}
    config = resolve_config(
        workdir, gitops, controller_port, poll_interval,
        running=any(running.values()), sync_delay=sync_delay, start_delay=start_delay,
    )
    workdir.create()
    config = with_free_ports(config, running["prometheus"] is not None,
                             running["haproxy"] is not None)
    save_config(workdir, config)

    started: list[str] = []
    with start_lock(workdir):  # a running sync may be restarting one of these right now
        if _alive(workdir, "prometheus") is None:
            prometheus.start(workdir, config, found["prometheus"])
            started.append("prometheus")
        elif controller_port is not None:
            prometheus.write_controller_targets(workdir, config.controller_port)
        if _alive(workdir, "haproxy") is None:
            haproxy.start(workdir, config, found["haproxy"])
            started.append("haproxy")

    if running["sync"] is None:
        before = time.time()
        _popen, record = procs.spawn(
            "sync", [sys.executable, "-m", "local.platform.sync", "--workdir", str(workdir.root)],
            workdir.logs / "sync.log",
            env={**procs.marked_env(str(workdir.root)), **credentials},
        )
        procs.write_record(workdir.pidfile("sync"), record)

        def sync_ready() -> bool:
            doc = read_json(workdir.status, {}) or {}
            return doc.get("sync_pid") == record.pid and doc.get("updated_at", 0) >= before

        wait_ready(sync_ready, "the sync loop", workdir.logs / "sync.log", record)
        started.append("sync")
    return {
        "workdir": str(workdir.root),
        "started": started,
        "reused": [name for name in SERVICES if name not in started],
        "config": config.to_json(),
    }


def down(workdir: Workdir, timeout: float = 10.0) -> dict[str, Any]:
    """Stop every process of the platform; raise if one survives."""
    stopped: list[str] = []
    survivors: list[str] = []

    def stop_file(path: pathlib.Path, label: str) -> None:
        record = procs.read_record(path)
        if record is None:
            path.unlink(missing_ok=True)
            return
        was_alive = procs.record_alive(record)
        if procs.stop(record, timeout=timeout):
            path.unlink(missing_ok=True)
            if was_alive:
                stopped.append(label)
        else:
            survivors.append(f"{label} (pid {record.pid})")

    # The sync first, so it restarts nothing; the rest together (each one's
    # graceful shutdown overlaps the others').
    stop_file(workdir.pidfile("sync"), "sync")
    rest = [(workdir.pidfile(name), name) for name in ("haproxy", "prometheus")]
    if workdir.server_pids.is_dir():
        rest += [(path, f"model server {path.stem}")
                 for path in sorted(workdir.server_pids.glob("*.json"))]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(rest)) as pool:
        list(pool.map(lambda item: stop_file(*item), rest))
    if survivors:
        raise PlatformError(f"could not stop: {', '.join(survivors)}")
    # Anything else carrying this work dir's marker is ours too (say, a server
    # whose pid file was lost in a sync crash): stop it the same way.
    # (The demo's controller, web UI and load generator are such processes too.)
    for pid in procs.processes_of(str(workdir.root)):
        start = procs.start_time_of(pid)
        record = procs.ProcRecord("other", pid, start if start is not None else -1, (), 0.0)
        label = f"{procs.command_of(pid) or 'process'} (pid {pid})"
        if not _stop_pid(record, timeout):
            survivors.append(label)
        else:
            stopped.append(label)
    if survivors:
        raise PlatformError(f"could not stop: {', '.join(survivors)}")
    workdir.release_admin_socket()
    return {"workdir": str(workdir.root), "stopped": stopped}


def _stop_pid(record: procs.ProcRecord, timeout: float) -> bool:
    """Stop one process that may not lead its own group."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        if not procs.record_alive(record):
            return True
        try:
            os.kill(record.pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and procs.record_alive(record):
            time.sleep(0.05)
    return not procs.record_alive(record)


def status(workdir: Workdir) -> dict[str, Any]:
    """Everything `mlops status` shows, as data (the CLI formats it)."""
    config = load_config(workdir)
    if config is None:
        raise PlatformError(
            f"no platform in {workdir.root}; start it with `mlops up --gitops REPO`"
        )
    services = {}
    for name in SERVICES:
        record = _alive(workdir, name)
        services[name] = {"running": record is not None, "pid": record.pid if record else None}
    doc = read_json(workdir.status, {}) or {}
    for name, count in (doc.get("service_restarts") or {}).items():
        if name in services:
            services[name]["restarts"] = count
    models = doc.get("models", {})
    for info in models.values():
        for version in info.get("versions", {}).values():
            if version.get("pid") and not procs.is_running(int(version["pid"])):
                version["phase"] = "exited" if services["sync"]["running"] else "gone"
    # Live weights from HAProxy itself (the sync's record may be a tick old).
    if services["haproxy"]["running"]:
        try:
            states = RuntimeApi(workdir.admin_socket(), timeout=1.0).servers_state()
        except OSError:
            states = []
        for state in states:
            version = models.get(state.backend, {}).get("versions", {}).get(state.name)
            if version is not None:
                version["haproxy_weight"] = state.weight
                version["haproxy_up"] = state.up and state.enabled
    fresh = services["sync"]["running"] and time.time() - float(doc.get("updated_at", 0)) < 10
    return {
        "workdir": str(workdir.root),
        "gitops": config.gitops,
        "branch": config.branch,
        "services": services,
        "sync_fresh": bool(fresh),
        "urls": {
            "prometheus": f"http://127.0.0.1:{config.prometheus_port}",
            "haproxy_stats": f"http://127.0.0.1:{config.haproxy_stats_port}/stats",
            "haproxy_metrics": f"http://127.0.0.1:{config.haproxy_stats_port}/metrics",
        },
        "applied_commit": doc.get("applied_commit"),
        "seen_commit": doc.get("seen_commit"),
        "tip_commit": doc.get("tip_commit"),
        "sync_delay": doc.get("sync_delay"),
        "errors": doc.get("errors", []),
        "git_error": doc.get("git_error"),
        "models": models,
        "pull_requests": _open_prs(config.gitops),
    }


def _open_prs(gitops: str) -> Any:
    """Open PRs from the local forge, if the GitOps room provides one."""
    try:
        from gitops.forges import local as local_forge  # optional, the GitOps room's
    except ImportError:
        return None
    lister = getattr(local_forge, "list_open", None)
    if lister is None:
        return None
    try:
        return [dict(pr) if isinstance(pr, dict) else getattr(pr, "__dict__", str(pr))
                for pr in lister(gitops)]
    except Exception as exc:  # noqa: BLE001 - status must render even if the forge fails
        return {"error": str(exc)}
