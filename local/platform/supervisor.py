"""The sync's supervisor half: start Prometheus or HAProxy again when one dies.

`mlops up` starts both and then the sync, which watches their pid files
every tick: a service whose process is gone (not one whose pid file was
removed: `mlops down` did that) is started again under the same start lock
`mlops up` takes, with a growing back-off while it keeps failing. `mlops up`
restarts a dead sync in turn.
"""

from __future__ import annotations

import logging
import subprocess
from typing import Callable

from local.platform import binaries, haproxy, procs, prometheus, services
from local.platform.workdir import PlatformConfig, Workdir

log = logging.getLogger("mlops.sync")

#: The services the sync supervises, by the name of their pid file, and how each starts.
STARTERS: dict[str, Callable[[Workdir, PlatformConfig, str], services.Started]] = {
    "prometheus": prometheus.start,
    "haproxy": haproxy.start,
}

#: The longest wait between two restarts of a crash loop (a service's or a model server's).
MAX_BACKOFF = 30.0


def backoff(failures: int) -> float:
    """Delay before restart number ``failures`` of a crash loop: 0, 1, 2, 4 ... 30 s."""
    if failures <= 1:
        return 0.0
    return min(MAX_BACKOFF, 2.0 ** (failures - 2))


class ServiceSupervisor:
    """Restarts of Prometheus and HAProxy: counts, failures and when to try again."""

    def __init__(self, workdir: Workdir, config: PlatformConfig) -> None:
        self.workdir = workdir
        self.config = config
        #: name -> restarts done by this sync (the status file's `service_restarts`).
        self.restarts: dict[str, int] = {name: 0 for name in STARTERS}
        self._failures: dict[str, int] = {name: 0 for name in STARTERS}
        self._retry_at: dict[str, float] = {name: 0.0 for name in STARTERS}
        self._popen: dict[str, subprocess.Popen[bytes]] = {}

    def supervise(self, now: float) -> list[str]:
        """Restart a service whose process died; returns the names restarted."""
        restarted = []
        for name in STARTERS:
            popen = self._popen.get(name)
            if popen is not None:
                popen.poll()  # reap our own child
            record = procs.read_record(self.workdir.pidfile(name))
            if record is None or procs.record_alive(record) or now < self._retry_at[name]:
                continue
            try:
                done = self._restart(name)
            except services.PlatformError as exc:
                self._failures[name] += 1
                self._retry_at[name] = now + max(1.0, backoff(self._failures[name]))
                log.error("could not restart %s: %s", name, exc)
                continue
            if done:
                self._failures[name] = 0
                self.restarts[name] += 1
                restarted.append(name)
        return restarted

    def _restart(self, name: str) -> bool:
        """Start ``name`` again unless `mlops up` holds the start lock or already did."""
        with services.start_lock(self.workdir, wait=False) as mine:
            record = procs.read_record(self.workdir.pidfile(name))
            if not mine or record is None or procs.record_alive(record):
                return False
            log.error("%s (pid %d) is gone; restarting it", name, record.pid)
            binary = binaries.which(name)
            if binary is None:
                raise services.PlatformError(f"{name} is no longer installed")
            popen, _record = STARTERS[name](self.workdir, self.config, binary)
        self._popen[name] = popen
        return True
