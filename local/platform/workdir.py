"""The work dir of the local platform: where every file lives, and its config (how
`mlops up` resolves it from what was passed, and keeps or moves its ports).

One directory holds everything the platform owns (`platform.json`, pid files under
`run/`, `logs/`, `prometheus/`, `haproxy/`, `state/status.json`, the GitOps mirror), so
a second `mlops up` finds its state and `mlops down` finds every process. The default is
``$MLOPS_WORKDIR``, else ``./.mlops`` if it exists, else ``~/.mlops``. The full list:
docs/inside-local.md.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import stat
import tempfile
from typing import Any

from cogs.files import atomic_write_json, read_json
from cogs.ports import free_port, port_free
from gitops.git import remote
from local.errors import PlatformError

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

    def create(self) -> None:
        """Make the directories every service writes into (`mlops up`)."""
        for sub in (self.run, self.logs, self.targets, self.haproxy, self.status.parent):
            sub.mkdir(parents=True, exist_ok=True)

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

    def server_pidfile(self, model: str, version: str, successor: bool = False) -> pathlib.Path:
        """A version's server's pid file; its successor's (a new pod started beside it,
        `plan` rule 2b) is `<m>-<v>.next.json` until it takes over."""
        return self.server_pids / f"{model}-{version}{'.next' if successor else ''}.json"

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


def resolve_config(
    workdir: Workdir, gitops: str | None, controller_port: int | None,
    poll_interval: float | None, running: bool, *,
    sync_delay: float | None = None, start_delay: float | None = None,
) -> PlatformConfig:
    """The config `mlops up` runs with: the saved one, changed by what was passed."""
    old = load_config(workdir)
    if old is None and not gitops:
        raise PlatformError(
            f"no platform in {workdir.root} yet: pass --gitops REPO (a bare repo path or URL); "
            "create one with `mlops gitops init`"
        )
    if gitops and not ("://" in gitops or gitops.startswith("git@")):
        gitops = str(pathlib.Path(gitops).expanduser().resolve())
    elif gitops:
        # `https://user:token@host/repo.git`: the token goes to the sync's environment
        # (see `up`), never into platform.json, status.json or any output.
        gitops = remote(gitops).url
    config = old or PlatformConfig(gitops=gitops or "")
    if gitops and gitops != config.gitops:
        if running:
            raise PlatformError(
                f"the platform in {workdir.root} syncs {config.gitops}; run `mlops down` "
                f"before pointing it at {gitops}, or use another --workdir"
            )
        config = dataclasses.replace(config, gitops=gitops)
    if controller_port is not None:
        config = dataclasses.replace(config, controller_port=controller_port)
    for name, value in (("sync_delay", sync_delay), ("start_delay", start_delay)):
        if value is not None:
            if value < 0:
                raise PlatformError(f"--{name.replace('_', '-')} must be >= 0 seconds, got {value}")
            change: dict[str, Any] = {name: float(value)}
            config = dataclasses.replace(config, **change)
    if poll_interval is not None:
        config = dataclasses.replace(config, poll_interval=poll_interval)
    return config


def with_free_ports(config: PlatformConfig, prometheus_running: bool,
                    haproxy_running: bool) -> PlatformConfig:
    """Keep the chosen ports unless a stopped service's port was taken meanwhile."""
    if not config.prometheus_port or (
        not prometheus_running and not port_free(config.prometheus_port)
    ):
        config = dataclasses.replace(config, prometheus_port=free_port())
    if not config.haproxy_stats_port or (
        not haproxy_running and not port_free(config.haproxy_stats_port)
    ):
        config = dataclasses.replace(config, haproxy_stats_port=free_port())
    return config
