"""Start Prometheus and HAProxy for a work dir and wait until they answer.

Used by `mlops up` and by the sync, which restarts either one if it dies
(the sync is the platform's supervisor while it runs; `mlops up` restarts a
dead sync). Each start renders the config from the platform config, spawns
the program in its own session with the work-dir marker, writes its pid
file and waits for readiness (Prometheus ``/-/ready``, HAProxy ``show info``
on the admin socket); a program that exits or stays unready raises
:class:`PlatformError` with the end of its log.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import pathlib
import subprocess
import time
from typing import Any, Callable, Iterator

from cogs.files import atomic_write_json, atomic_write_text, read_json
from cogs.ports import free_port, port_free
from local.errors import LocalError
from local.platform import haproxy, procs, prometheus
from local.platform.runtime import RuntimeApi
from local.platform.workdir import PlatformConfig, Workdir

READY_TIMEOUT = 30.0


class PlatformError(LocalError):
    """The platform could not be started or stopped as asked."""


def http_ok(port: int, path: str, timeout: float = 0.5) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def tail(path: pathlib.Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def wait_ready(check: Callable[[], bool], what: str, log: pathlib.Path, record: procs.ProcRecord,
               popen: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if check():
            return
        if popen is not None:
            popen.poll()
        if not procs.record_alive(record):
            raise PlatformError(
                f"{what} exited during start-up; its log ({log}) ends with:\n{tail(log)}"
            )
        time.sleep(0.1)
    raise PlatformError(f"{what} not ready after {READY_TIMEOUT:.0f} s; see {log}:\n{tail(log)}")


Started = tuple[subprocess.Popen[bytes], procs.ProcRecord]


@contextlib.contextmanager
def start_lock(workdir: Workdir, wait: bool = True) -> Iterator[bool]:
    """Exclusive right to start services of ``workdir`` (`mlops up` vs the sync).

    Yields False (and holds nothing) when ``wait`` is False and someone else
    holds it, so the sync can skip a tick instead of blocking.
    """
    workdir.run.mkdir(parents=True, exist_ok=True)
    with open(workdir.run / ".start.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def start_prometheus(workdir: Workdir, config: PlatformConfig, binary: str) -> Started:
    atomic_write_text(
        workdir.prometheus / "prometheus.yml", prometheus.render_config(workdir, config)
    )
    if not (workdir.targets / prometheus.MODELS_TARGETS).exists():
        prometheus.write_model_targets(workdir, [])
    prometheus.write_controller_targets(workdir, config.controller_port)
    log = workdir.logs / "prometheus.log"
    popen, record = procs.spawn(
        "prometheus", prometheus.command(binary, workdir, config), log,
        env=procs.marked_env(str(workdir.root)),
    )
    procs.write_record(workdir.pidfile("prometheus"), record)
    wait_ready(
        lambda: http_ok(config.prometheus_port, "/-/ready"), "prometheus", log, record, popen
    )
    return popen, record


def start_haproxy(workdir: Workdir, config: PlatformConfig, binary: str) -> Started:
    """Start HAProxy with every known model frontend and empty backends.

    The sync adds the servers through the runtime API on its next tick.
    Frontend ports taken by someone else meanwhile are moved (and saved).
    """
    frontends: dict[str, int] = {
        str(k): int(v) for k, v in (read_json(workdir.frontends, {}) or {}).items()
    }
    moved = [m for m, p in frontends.items() if not port_free(p)]
    for model in moved:
        frontends[model] = free_port()
    if moved:
        atomic_write_json(workdir.frontends, frontends)
    atomic_write_text(workdir.haproxy_cfg, haproxy.render_config(
        workdir, stats_port=config.haproxy_stats_port, frontends=frontends))
    socket_path = workdir.admin_socket()
    socket_path.unlink(missing_ok=True)
    log = workdir.logs / "haproxy.log"
    popen, record = procs.spawn(
        "haproxy", haproxy.command(binary, workdir), log, env=procs.marked_env(str(workdir.root)),
    )
    procs.write_record(workdir.pidfile("haproxy"), record)
    api = RuntimeApi(socket_path, timeout=1.0)

    def ready() -> bool:
        try:
            return "Name: HAProxy" in api.info()
        except OSError:
            return False

    wait_ready(ready, "haproxy", log, record, popen)
    return popen, record


STARTERS: dict[str, Callable[[Workdir, PlatformConfig, str], Any]] = {
    "prometheus": start_prometheus,
    "haproxy": start_haproxy,
}
