"""A build's inputs as one digest: an image built from the same inputs is not built again.

A build's result depends on its Dockerfile, its build arguments, the image it starts
FROM and the files of its context that the build can see, which are those a
`.dockerignore` at the context's root leaves in. BuildKit and podman (buildah) send
exactly those (`.dockerignore` patterns, Moby's rules: paths relative to the context,
`**` for any number of directories, `!` for an exception, the last match wins);
docker-py implements the same rules (`docker.utils.build.exclude_paths`), so the
files are listed with it instead of a rewrite. The Dockerfile is always hashed,
whatever the patterns say.

The digest covers each file's path, executable bit and bytes (a symlink: its
target), the Dockerfile's bytes, the build arguments and the base image's ID, in a
fixed order. Timestamps are left out: the layer caches of BuildKit and podman do
not look at them either, so a fresh clone of the same commit has the same digest.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import stat
from typing import Mapping

from mlops.errors import UserError

__all__ = ["DIGEST_LABEL", "KIT_LABEL", "context_digest", "context_files", "paths_digest"]

#: The label every image built by `mlops` carries: the digest of what it was built from.
DIGEST_LABEL = "org.paddle-mlops.inputs"
#: The training base's second label: the digest of what a training image uses of it (the kit,
#: what it imports, the dependencies and the Dockerfile), `paths_digest`.
KIT_LABEL = "org.paddle-mlops.kit"


def _patterns(context: pathlib.Path) -> list[str]:
    ignore = context / ".dockerignore"
    if not ignore.is_file():
        return []
    lines = (line.strip() for line in ignore.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def context_files(context: pathlib.Path, dockerfile: str = "Dockerfile") -> list[str]:
    """The context's files a build sees (relative, sorted): `.dockerignore` applied."""
    # docker-py's package pulls its API client
    from docker.utils.build import exclude_paths

    if not context.is_dir():
        raise UserError(f"{context}: the build context is not a directory")
    kept = exclude_paths(str(context), _patterns(context), dockerfile=dockerfile)
    return sorted(p for p in kept
                  if (context / p).is_symlink() or not (context / p).is_dir())


def context_digest(context: pathlib.Path, dockerfile: pathlib.Path,
                   build_args: Mapping[str, str], *, base_id: str = "",
                   extra: str = "") -> str:
    """sha256 (hex) of everything the build of `dockerfile` in `context` depends on.

    `base_id`: the ID of the image the Dockerfile starts FROM (a rebuilt base makes
    a new digest); `extra`: anything else that decides the result (a target).
    """
    if not dockerfile.is_file():
        raise UserError(f"{dockerfile}: no such Dockerfile")
    h = hashlib.sha256()

    def field(*parts: str | bytes) -> None:
        for part in parts:
            data = part.encode() if isinstance(part, str) else part
            h.update(len(data).to_bytes(8, "big") + data)

    field("dockerfile", dockerfile.read_bytes(), "base", base_id, "extra", extra)
    for name, value in sorted(build_args.items()):
        field("arg", name, value)
    relative = os.path.relpath(dockerfile, context)
    for name in context_files(context, relative):
        path = context / name
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            field("link", name, os.readlink(path))
        else:
            field("file", name, "x" if info.st_mode & 0o111 else "-", path.read_bytes())
    return h.hexdigest()


def paths_digest(root: pathlib.Path, paths: tuple[str, ...], *, extra: str = "") -> str:
    """sha256 (hex) of the files under `paths` (relative to `root`; bytecode left out) and
    `extra`, in a fixed order: a narrower key than `context_digest` for what one use of an
    image depends on."""
    h = hashlib.sha256()
    for part in (extra,):
        h.update(len(part.encode()).to_bytes(8, "big") + part.encode())
    for name in paths:
        top = root / name
        files = [top] if top.is_file() else sorted(
            f for f in top.rglob("*") if f.is_file() and "__pycache__" not in f.parts
            and f.suffix != ".pyc")
        for path in files:
            rel = str(path.relative_to(root)).encode()
            data = path.read_bytes()
            h.update(len(rel).to_bytes(8, "big") + rel + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()
