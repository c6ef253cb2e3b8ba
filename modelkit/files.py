"""Atomic writes: a reader (the next step, a resumed run) sees the old file or the new, never half.

Each write goes to a hidden temporary name beside the target (same directory,
so same file system) and is renamed over it with `os.replace`, which POSIX
makes atomic. The temporary name carries the process id: two ranks or two
runs writing the same target never share one.
"""

from __future__ import annotations

import os
import pathlib
import shutil
from typing import Callable

__all__ = ["atomic_copy", "atomic_write", "atomic_write_text"]


def atomic_write(path: pathlib.Path, write: Callable[[pathlib.Path], object]) -> pathlib.Path:
    """Call `write(tmp)` to write a temporary file beside `path`, then rename it to `path`.

    For writers that want a file name (`paddle.save`, `PIL.Image.save`); a failed
    `write` leaves no temporary file behind.
    """
    path = pathlib.Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_text(path: pathlib.Path, text: str) -> pathlib.Path:
    """Write `text` to `path` atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def atomic_copy(source: pathlib.Path, path: pathlib.Path) -> pathlib.Path:
    """Copy `source` to `path` atomically (whole or absent)."""
    return atomic_write(path, lambda tmp: shutil.copyfile(source, tmp))
