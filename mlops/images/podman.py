"""Podman with a store of our own: every call sees the same settings and the same storage.

Images built for the local stand-in of a cluster live in `$MLOPS_CONTAINERS_DIR`
(default `~/.cache/paddle-mlops/containers`): `storage/` (the graphroot), `tmp/`,
`base/` (the Debian rootfs tar), `containers.conf` and `storage.conf` written once and
named by every call, `events.log`. The runroot lives under `/run`; every call passes
`--pull=never`. Why these settings: docs/guides/images.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
from typing import Mapping, Sequence

from mlops.errors import UserError

__all__ = ["PodmanMissing", "Store", "default_store_dir", "output_tail"]

STORE_ENV = "MLOPS_CONTAINERS_DIR"
_ULIMITS = ("nofile=20000:20000", "nproc=32768:32768")


class PodmanMissing(UserError):
    """podman (or runc, mmdebstrap) is not installed."""


def default_store_dir() -> pathlib.Path:
    """`$MLOPS_CONTAINERS_DIR`, else `~/.cache/paddle-mlops/containers`."""
    chosen = os.environ.get(STORE_ENV)
    if chosen:
        return pathlib.Path(chosen).expanduser().resolve()
    cache = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(cache) / "paddle-mlops" / "containers"


def output_tail(proc: subprocess.CompletedProcess[str], lines: int = 25) -> str:
    """The last `lines` of what a captured podman run printed: what a failed build's
    message shows (the failing step and its error are at the end)."""
    return "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-lines:])


def require_tools(*programs: str, path: str | None = None) -> None:
    """Fail with the apt command when one of `programs` is missing (on `path`, default
    $PATH plus the sbin dirs, where Debian puts runc)."""
    search = path if path is not None else f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
    missing = [p for p in programs if shutil.which(p, path=search) is None]
    if missing:
        raise PodmanMissing(
            f"{', '.join(missing)} not found: building and running the images needs podman "
            "(with runc) and mmdebstrap. Install them with: sudo apt-get install podman runc "
            "mmdebstrap (or run bash scripts/setup.sh)")


class Store:
    """One private podman store and the environment that selects it."""

    def __init__(self, root: pathlib.Path | None = None) -> None:
        self.root = (root or default_store_dir()).resolve()

    @property
    def run_dir(self) -> pathlib.Path:
        """Short, per-boot: podman's runroot and tmp_dir (see the module docstring)."""
        tag = hashlib.sha256(str(self.root).encode()).hexdigest()[:8]
        if os.geteuid() == 0:
            return pathlib.Path("/run/paddle-mlops") / tag
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        if runtime:
            return pathlib.Path(runtime) / f"paddle-mlops-{tag}"
        return pathlib.Path(tempfile.gettempdir()) / f"paddle-mlops-{os.getuid()}-{tag}"

    @property
    def tmp(self) -> pathlib.Path:
        """Scratch space for podman, buildah and mmdebstrap (kept out of /tmp)."""
        return self.root / "tmp"

    def prepare(self) -> None:
        """Create the directories and write the two configuration files (idempotent)."""
        for sub in ("storage", "tmp", "base"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if len(str(self.run_dir / "storage")) > 50:
            raise UserError(f"{self.run_dir}: too long a path for podman's runroot (50 "
                            "characters at most); set XDG_RUNTIME_DIR to a short directory")
        runtime = shutil.which("runc") or shutil.which("runc", path="/usr/sbin:/sbin") or "runc"
        ulimits = ", ".join(f'"{u}"' for u in _ULIMITS)
        _write_if_changed(self.root / "containers.conf", (
            "# Written by mlops (mlops/images/podman.py): see its docstring for why.\n"
            "[containers]\n"
            f"default_ulimits = [{ulimits}]\n"
            "[engine]\n"
            f'runtime = "{runtime}"\n'
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'events_logfile_path = "{self.root / "events.log"}"\n'
            f'tmp_dir = "{self.run_dir / "libpod"}"\n'
            f'image_copy_tmp_dir = "{self.tmp}"\n'
            f'volume_path = "{self.root / "storage" / "volumes"}"\n'))
        _write_if_changed(self.root / "storage.conf", (
            "# Written by mlops (mlops/images/podman.py): the same file for every call.\n"
            "[storage]\n"
            'driver = "overlay"\n'
            f'graphroot = "{self.root / "storage"}"\n'
            f'runroot = "{self.run_dir / "storage"}"\n'))

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of every podman call: our two config files, our TMPDIR."""
        env = dict(os.environ if base is None else base)
        env.update(CONTAINERS_CONF=str(self.root / "containers.conf"),
                   CONTAINERS_STORAGE_CONF=str(self.root / "storage.conf"),
                   TMPDIR=str(self.tmp))
        return env

    def podman(self, *args: str, check: bool = True, capture: bool = True,
               timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        """Run `podman ARGS` against this store."""
        proc = subprocess.run(["podman", *args], env=self.env(), text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL,
                              capture_output=capture)
        if check and proc.returncode != 0:
            detail = (proc.stderr or proc.stdout or "").strip()[-2000:] if capture else ""
            raise UserError(f"podman {' '.join(args[:2])} failed (exit {proc.returncode})"
                            + (f": {detail}" if detail else ""))
        return proc

    def image_labels(self, name: str) -> dict[str, str] | None:
        """The labels of image `name`, or None when the store has no such image."""
        proc = self.podman("image", "inspect", "--format", "{{json .Labels}}", name, check=False)
        if proc.returncode != 0:
            return None

        return dict(json.loads(proc.stdout.strip() or "{}") or {})

    def image_id(self, name: str) -> str | None:
        """The ID of image `name`, or None when the store has no such image."""
        proc = self.podman("image", "inspect", "--format", "{{.Id}}", name, check=False)
        return proc.stdout.strip() or None if proc.returncode == 0 else None

    def remove_containers(self, names: Sequence[str]) -> None:
        """Force-remove the named containers (left by an interrupted run); absent ones are fine."""
        if names:
            self.podman("rm", "--force", "--ignore", *names, check=False)


def _write_if_changed(path: pathlib.Path, text: str) -> None:
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
