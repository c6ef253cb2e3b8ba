"""The work dir of the local platform: where every file lives, and its config.

One directory holds everything the platform owns, so a second `mlops up`
finds its state and `mlops down` finds every process::

    platform.json           config written by `mlops up` (ports, GitOps repo)
    run/<name>.json         pid files: prometheus, haproxy, sync
    run/servers/<m>-<v>.json  pid files of model servers (written by the sync)
    run/.start.lock         taken while `mlops up` or the sync starts a service
    logs/                   one log per process (servers under logs/servers/)
    prometheus/             prometheus.yml, targets/*.json (file_sd), data/
    haproxy/haproxy.cfg     rendered config (the admin socket sits beside it
                            unless the path is too long for a unix socket)
    state/status.json       what the sync applied (read by `mlops status`)
    state/frontends.json    model -> HAProxy frontend port (owned by the sync)
    gitops-cache/           bare git repo the sync fetches the GitOps main into

The default work dir is ``$MLOPS_WORKDIR``, else ``./.mlops`` if it exists,
else ``~/.mlops``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import stat
import tempfile
from typing import Any

from cogs.files import atomic_write_json, read_json

# sun_path is 108 bytes on Linux, including the terminating NUL, and HAProxy
# binds `<path>.<pid>.tmp` first and renames it, so it refuses a path longer than
# 107 - 10 = 97 ("socket path ... too long (max 97)"; `str2sa_range` in HAProxy's
# src/tools.c). A work dir one level deeper than the tests' used to fail `mlops up`.
_MAX_SOCKET_PATH = 97


def default_workdir() -> pathlib.Path:
    env = os.environ.get("MLOPS_WORKDIR")
    if env:
        return pathlib.Path(env).expanduser().resolve()
    local = pathlib.Path.cwd() / ".mlops"
    if local.is_dir():
        return local.resolve()
    return (pathlib.Path.home() / ".mlops").resolve()


@dataclasses.dataclass(frozen=True)
class Workdir:
    """Paths inside one platform work dir."""

    root: pathlib.Path

    @property
    def config(self) -> pathlib.Path:
        return self.root / "platform.json"

    @property
    def run(self) -> pathlib.Path:
        return self.root / "run"

    @property
    def server_pids(self) -> pathlib.Path:
        return self.run / "servers"

    @property
    def logs(self) -> pathlib.Path:
        return self.root / "logs"

    @property
    def prometheus(self) -> pathlib.Path:
        return self.root / "prometheus"

    @property
    def targets(self) -> pathlib.Path:
        return self.prometheus / "targets"

    @property
    def haproxy(self) -> pathlib.Path:
        return self.root / "haproxy"

    @property
    def haproxy_cfg(self) -> pathlib.Path:
        return self.haproxy / "haproxy.cfg"

    @property
    def status(self) -> pathlib.Path:
        return self.root / "state" / "status.json"

    @property
    def frontends(self) -> pathlib.Path:
        return self.root / "state" / "frontends.json"

    @property
    def gitops_cache(self) -> pathlib.Path:
        return self.root / "gitops-cache"

    def pidfile(self, name: str) -> pathlib.Path:
        return self.run / f"{name}.json"

    def server_pidfile(self, model: str, version: str) -> pathlib.Path:
        return self.server_pids / f"{model}-{version}.json"

    def server_log(self, model: str, version: str) -> pathlib.Path:
        return self.logs / "servers" / f"{model}-{version}.log"

    def admin_socket(self) -> pathlib.Path:
        """HAProxy's admin socket: in the work dir, or in a private temp dir if too long.

        A Unix socket path is limited to ~108 bytes, so a deep work dir needs a
        short path elsewhere. That path must not be guessable: a name derived
        from the work dir in the shared /tmp could be created first by another
        user (a socket or a link of theirs where HAProxy's admin API should
        be). So the directory is made by ``mkdtemp`` (random name, mode 0700),
        and its name kept in ``run/admin-socket-dir`` so every later command
        finds the same socket; a recorded directory that is no longer ours
        and private is replaced by a new one.
        """
        path = self.haproxy / "admin.sock"
        if len(str(path)) <= _MAX_SOCKET_PATH:
            return path
        pointer = self.run / "admin-socket-dir"
        try:
            recorded = pathlib.Path(pointer.read_text().strip())
            if _private_dir(recorded):
                return recorded / "admin.sock"
        except OSError:
            pass
        self.run.mkdir(parents=True, exist_ok=True)
        made = pathlib.Path(tempfile.mkdtemp(prefix="mlops-haproxy-"))
        pointer.write_text(str(made) + "\n")
        return made / "admin.sock"

    def release_admin_socket(self) -> None:
        """Remove the private temp dir of a long work dir's socket (after `mlops down`).

        Only a dir that is still ours and private is removed, and only its
        socket in it: anything else found there is left for a human to see.
        """
        pointer = self.run / "admin-socket-dir"
        try:
            recorded = pathlib.Path(pointer.read_text().strip())
        except OSError:
            return
        try:
            if not _private_dir(recorded):
                return
            (recorded / "admin.sock").unlink(missing_ok=True)
            recorded.rmdir()
        except FileNotFoundError:
            pass  # already gone (a reboot cleaned /tmp): forget it
        except OSError:
            return
        pointer.unlink(missing_ok=True)


def _private_dir(path: pathlib.Path) -> bool:
    """A real directory (not a link) owned by this user that nobody else may enter."""
    st = path.lstat()
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077 == 0


@dataclasses.dataclass(frozen=True)
class PlatformConfig:
    """``platform.json``: chosen once by `mlops up`, reused by later runs."""

    gitops: str
    branch: str = "main"
    prometheus_port: int = 0
    haproxy_stats_port: int = 0
    controller_port: int | None = None
    poll_interval: float = 0.5
    #: Cluster-latency mode: a commit is applied once it has been on main this
    #: long (Argo CD polls every 180 s), and a new server is not probed before
    #: this long after its start (image pull, container start). 0: off.
    sync_delay: float = 0.0
    start_delay: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PlatformConfig:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in fields})


def load_config(workdir: Workdir) -> PlatformConfig | None:
    doc = read_json(workdir.config)
    if not isinstance(doc, dict) or "gitops" not in doc:
        return None
    return PlatformConfig.from_json(doc)


def save_config(workdir: Workdir, config: PlatformConfig) -> None:
    atomic_write_json(workdir.config, config.to_json())
