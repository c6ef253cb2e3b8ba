"""What starting a platform service takes, whichever it is: the start lock, the wait.

Each service's own file starts it (``prometheus.start``, ``haproxy.start``):
it renders its config from the platform config, spawns the program in its
own session with the work-dir marker, writes its pid file and waits here
for readiness; a program that exits or stays unready raises
:class:`PlatformError` with the end of its log. `mlops up` starts them under
:func:`start_lock`, and so does the sync when it restarts one that died
(:mod:`supervisor`).
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import pathlib
import subprocess
import time
from typing import Callable, Iterator

from local.errors import PlatformError
from local.platform import procs
from local.platform.workdir import Workdir

__all__ = ["READY_TIMEOUT", "PlatformError", "Started", "http_ok", "start_lock", "tail",
           "wait_ready"]

READY_TIMEOUT = 30.0


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
