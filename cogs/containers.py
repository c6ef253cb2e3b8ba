"""A container spec as a local process: the one translator every stand-in uses.

Pure: `env` with `$(VAR)` expanded as the kubelet expands it (a `valueFrom` from the
`secrets` the caller passes), `command` + `args` run by this interpreter, and paths under
a volume mount rewritten to the local directory standing in for it. Callers: the Argo
stand-in (local.argo.runner), the PaddleJob's workers (workflows.paddlejob_local), a
model server's Deployment (local.platform.podspec) and podman (mlops.images.podrun).
Errors are :class:`ContainerSpecError`, naming the source and the field. Upstream rules:
docs/inside-foundations.md.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from typing import Any, Mapping, Sequence

__all__ = [
    "ContainerSpecError",
    "LocalProcess",
    "Mounts",
    "container_env",
    "expand_refs",
    "local_argv",
    "local_process",
]

_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


class ContainerSpecError(ValueError):
    """The container spec cannot run as a local process; the message names source and field."""


def expand_refs(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: unknown references stay as written."""
    return _VAR_REF.sub(lambda m: env.get(m.group(1), m.group(0)), text)


@dataclasses.dataclass(frozen=True)
class Mounts:
    """Container paths (mount paths) -> the local directories standing in for them."""

    paths: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def local(self, path: str) -> str | None:
        """The local path for a container path, or None when no mount holds it."""
        for mount in sorted(self.paths, key=len, reverse=True):
            if path == mount or path.startswith(mount.rstrip("/") + "/"):
                return self.paths[mount] + path[len(mount):]
        return None

    def remap(self, text: str) -> str:
        """`text` as a local path when it is one under a mount, else unchanged."""
        local = self.local(text)
        return text if local is None else local

    def require(self, path: str, where: str) -> str:
        """The local path for `path`; `ContainerSpecError` naming `where` if unmounted."""
        local = self.local(path)
        if local is None:
            raise ContainerSpecError(
                f"{where}: {path} is outside the mapped directories "
                f"({', '.join(sorted(self.paths)) or 'none'})")
        return local


@dataclasses.dataclass(frozen=True)
class LocalProcess:
    """What runs for one container: argv, the container's env, and its working directory."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None


def container_env(
    container: Mapping[str, Any],
    *,
    source: str,
    mounts: Mounts | None = None,
    secrets: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The container's env, expanded in order and with mounted paths mapped.

    With `secrets`, a `valueFrom` entry must be among them (a missing Secret
    keeps a pod from starting); without, it is left out.
    """
    env: dict[str, str] = {}  # as the container sees it: references expand in its paths
    for i, entry in enumerate(container.get("env") or []):
        key = str(entry.get("name", ""))
        if not key:
            raise ContainerSpecError(f"{source}: env[{i}] has no name")
        if "value" in entry:
            env[key] = expand_refs(str(entry["value"]), env)
        elif secrets is not None:
            if secrets.get(key) is None:
                raise ContainerSpecError(
                    f"{source}: env {key} comes from {entry.get('valueFrom')}, which this "
                    "machine does not have; pass it in secrets")
            env[key] = str(secrets[key])
    return {key: (mounts or Mounts()).remap(value) for key, value in env.items()}


def local_argv(argv: Sequence[str], python: str = sys.executable) -> list[str]:
    """`python ...` and `mlops ...` as this interpreter runs them."""
    out = list(argv)
    if out and out[0] == "mlops":
        return [python, "-m", "mlops", *out[1:]]
    if out and out[0] in ("python", "python3"):
        return [python, *out[1:]]
    return out


def local_process(
    container: Mapping[str, Any],
    *,
    source: str,
    mounts: Mounts | None = None,
    env: Mapping[str, str] | None = None,
    python: str = sys.executable,
) -> LocalProcess:
    """The process for `container` (see the module docstring).

    `env`, when given, is the environment `$(VAR)` references expand from
    (the caller's, built on `container_env`, e.g. with an operator's
    variables added); by default the container's own. The argv keeps
    `python`/`mlops` as written: `local_argv` makes them this interpreter's.
    Without mounts, `workingDir` is kept as written (a container engine runs it).
    """
    mounts = mounts or Mounts()
    parts = [*(container.get("command") or []), *(container.get("args") or [])]
    if not parts:
        raise ContainerSpecError(f"{source}: the container has no command or args; the "
                                 "image's own entrypoint cannot run locally")
    # References expand in the container's paths, then the result is mapped (once).
    references = dict(env) if env is not None else container_env(container, source=source)
    argv = [mounts.remap(expand_refs(str(p), references)) for p in parts]
    environment = dict(env) if env is not None else container_env(
        container, source=source, mounts=mounts)
    workdir = container.get("workingDir")
    cwd = None if not workdir else (
        mounts.require(str(workdir), f"{source}: workingDir") if mounts.paths else str(workdir))
    return LocalProcess(argv=argv, env=environment, cwd=cwd)
