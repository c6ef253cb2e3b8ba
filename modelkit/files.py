"""Atomic writes for a model repo: the floor's (`cogs.files`), under the names a `train.py` uses.

A reader (the next step, a resumed run) sees the old file or the new, never
half: each write goes to a hidden temporary name beside the target and is
renamed over it (`cogs.files.replacing`).
"""

from __future__ import annotations

import pathlib
import shutil
from typing import Callable

from cogs.files import atomic_write_text as _write_text
from cogs.files import replacing

__all__ = ["atomic_copy", "atomic_write", "atomic_write_text"]


def atomic_write(path: pathlib.Path, write: Callable[[pathlib.Path], object]) -> pathlib.Path:
    """Call `write(tmp)` to write a temporary file beside `path`, then rename it to `path`.

    For writers that want a file name (`paddle.save`, `PIL.Image.save`); a failed
    `write` leaves no temporary file behind.
    """
    with replacing(pathlib.Path(path)) as tmp:
        write(tmp)
    return pathlib.Path(path)


def atomic_write_text(path: pathlib.Path, text: str) -> pathlib.Path:
    """Write `text` to `path` atomically."""
    _write_text(pathlib.Path(path), text)
    return pathlib.Path(path)


def atomic_copy(source: pathlib.Path, path: pathlib.Path) -> pathlib.Path:
    """Copy `source` to `path` atomically (whole or absent)."""
    return atomic_write(path, lambda tmp: shutil.copyfile(source, tmp))
