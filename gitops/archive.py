"""Extract a `git archive` tar safely on every Python the project supports.

`tarfile`'s `filter="data"` (PEP 706) refuses absolute paths, `..`, links
leaving the destination and device files. It exists from Python 3.11.4 and
3.10.12 on, but `requires-python` is >= 3.10 and Debian 12's own python3 is
3.11.2 without it: there `extractall(filter=...)` is a TypeError (found by
running the controller in an image built on Debian bookworm's Python).
Without the filter, the same refusals are made by hand for what `git archive`
writes: regular files and directories inside the destination, with no
set-id bits; anything else (a symlink) is left out and logged.
"""

from __future__ import annotations

import logging
import os
import tarfile
from typing import Sequence

__all__ = ["extract"]

log = logging.getLogger("mlops.gitops")


def extract(tar: tarfile.TarFile, dest: str | os.PathLike[str],
            members: Sequence[tarfile.TarInfo] | None = None) -> None:
    """`tar.extractall(dest, members)` with PEP 706's `data` filter, or its checks by hand."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, members=members, filter="data")
    else:
        tar.extractall(dest, members=checked_members(tar, dest, members))


def checked_members(tar: tarfile.TarFile, dest: str | os.PathLike[str],
                    members: Sequence[tarfile.TarInfo] | None = None) -> list[tarfile.TarInfo]:
    """The members that are regular files or directories inside `dest`, modes made safe."""
    root = os.path.realpath(dest)
    kept = []
    for member in tar.getmembers() if members is None else members:
        target = os.path.realpath(os.path.join(root, member.name))
        if os.path.isabs(member.name) or os.path.commonpath([root, target]) != root:
            raise ValueError(f"{member.name}: outside the destination; refused")
        if not (member.isfile() or member.isdir()):
            log.warning("%s: not a regular file or directory; left out", member.name)
            continue
        member.mode &= 0o755  # no set-id or world-writable bits, as the data filter
        kept.append(member)
    return kept
