"""Supervised processes: start detached, identify by pid file, stop for sure.

Every process the platform starts runs in its own session (so its whole
process group can be signalled, children included) with stdout/stderr
appended to a log file, and gets a pid file: JSON with the pid *and* the
process start time read from ``/proc/<pid>/stat``. A pid alone is not an
identity -- after a reboot or a long pause the number may belong to an
unrelated process -- so "alive" means "a process with this pid and this
start time exists and is not a zombie". Linux only, like the platform.

Stopping sends SIGTERM to the process group, waits, then SIGKILLs the group,
and reports whether anything survived; `mlops down` relies on that to promise
"no process left behind".
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import time
from typing import Any, Sequence

from cogs.files import atomic_write_text


@dataclasses.dataclass(frozen=True)
class ProcRecord:
    """What a pid file holds."""

    name: str
    pid: int
    start_time: int
    argv: tuple[str, ...]
    started_at: float
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pid": self.pid,
            "start_time": self.start_time,
            "argv": list(self.argv),
            "started_at": self.started_at,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ProcRecord:
        return cls(
            name=str(doc["name"]),
            pid=int(doc["pid"]),
            start_time=int(doc["start_time"]),
            argv=tuple(doc.get("argv", ())),
            started_at=float(doc.get("started_at", 0.0)),
            extra=dict(doc.get("extra", {})),
        )


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may contain spaces.
    rest = raw[raw.rfind(")") + 2 :].split()
    return rest  # rest[0] is field 3 (state)


def start_time_of(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return int(fields[19])  # field 22 overall


def is_running(pid: int, start_time: int | None = None) -> bool:
    """True if ``pid`` exists, is not a zombie and (if given) started at ``start_time``."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return start_time is None or int(fields[19]) == start_time


def record_alive(record: ProcRecord) -> bool:
    """True if the process a pid file describes is still that process and alive."""
    return is_running(record.pid, record.start_time)


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: pathlib.Path,
    *,
    env: dict[str, str] | None = None,
    cwd: pathlib.Path | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[subprocess.Popen[bytes], ProcRecord]:
    """Start ``argv`` in a new session, output appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            cwd=str(cwd) if cwd else None,
            close_fds=True,
        )
    start = start_time_of(proc.pid)
    record = ProcRecord(
        name=name,
        pid=proc.pid,
        start_time=start if start is not None else -1,
        argv=tuple(argv),
        started_at=time.time(),
        extra=dict(extra or {}),
    )
    return proc, record


def write_record(path: pathlib.Path, record: ProcRecord) -> None:
    atomic_write_text(path, json.dumps(record.to_json(), indent=2) + "\n")


def read_record(path: pathlib.Path) -> ProcRecord | None:
    """The pid file at ``path``, or None if it is missing or unreadable."""
    try:
        return ProcRecord.from_json(json.loads(path.read_text()))
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg(0) succeeds while zombies of the group exist; check members.
    return bool(_members(pgid, marked_only=False))


def _members(pgid: int, *, marked_only: bool) -> list[int]:
    """Live (non-zombie) pids of process group ``pgid``; with ``marked_only``, only
    those whose environment carries the platform's :data:`MARKER`."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if not fields or int(fields[2]) != pgid or fields[0] in ("Z", "X"):
            continue
        if marked_only:
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if not any(var.startswith(MARKER.encode() + b"=") for var in environ):
                continue
        found.append(int(entry.name))
    return found


def stop(
    record: ProcRecord, *, timeout: float = 10.0, popen: subprocess.Popen[bytes] | None = None
) -> bool:
    """Stop the process group of ``record``; True if nothing of it survives.

    While the leader is still the recorded process (pid + start time) the
    whole group is signalled. Once the leader is gone its pid, and so the
    group id, may have been reused by an unrelated process group (after a
    reboot, or a long time): then only the group's members that carry the
    platform's marker in their environment (children our process started)
    are signalled, one by one, and nothing else is touched.
    """
    pgid = record.pid
    if record_alive(record):
        targets = None  # the whole group
    else:
        targets = _members(pgid, marked_only=True)
        if not targets:
            _reap(popen)
            return True

    def alive() -> bool:
        if targets is None:
            return _group_alive(pgid)
        return any(is_running(pid) for pid in targets)

    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            if targets is None:
                os.killpg(pgid, sig)
            else:
                for pid in targets:
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
        except ProcessLookupError:
            _reap(popen)
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(popen)
            if not alive():
                return True
            time.sleep(0.05)
    _reap(popen)
    return not alive()


def _reap(popen: subprocess.Popen[bytes] | None) -> None:
    if popen is not None:
        popen.poll()


#: Set in the environment of every process the platform starts, so a check
#: can find them all (model servers' command lines do not name the work dir).
MARKER = "MLOPS_PLATFORM_WORKDIR"


def marked_env(workdir: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) plus the work-dir marker."""
    env = dict(os.environ if base is None else base)
    env[MARKER] = workdir
    return env


def command_of(pid: int) -> str:
    """A short name for what `pid` runs: `mlops <command>` for our CLI (`python -m
    mlops controller ...`), else its program's name (the kernel's `comm` for a
    process already exiting, whose command line reads empty); "" when gone."""
    proc = pathlib.Path(f"/proc/{pid}")
    try:
        argv = [a.decode(errors="replace") for a in
                (proc / "cmdline").read_bytes().split(b"\0") if a]
        if not argv:
            return (proc / "comm").read_text().strip()
    except OSError:
        return ""
    for i, arg in enumerate(argv):
        if arg.endswith("/mlops") or (arg == "mlops" and i > 0 and argv[i - 1] == "-m"):
            command = next((a for a in argv[i + 1:] if not a.startswith("-")), "")
            return f"mlops {command}".rstrip()
    return pathlib.Path(argv[0]).name


def processes_of(workdir: str) -> list[int]:
    """Pids of live processes started for ``workdir`` (found by the marker)."""
    found = []
    me = os.getpid()
    marker = f"{MARKER}={workdir}".encode()
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            if is_running(int(entry.name)):
                found.append(int(entry.name))
    return found
