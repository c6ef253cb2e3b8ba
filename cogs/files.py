"""Atomic file writes: a reader (status, Prometheus file_sd, HAProxy reload, a model
server, the demo) sees the old file or the new one, never half of one.

The one way the project writes a file others read while it runs: into a temp
file beside the target (same directory, so same filesystem), then one
`os.replace` (POSIX `rename(2)`: atomic for readers of the target path). A
failure before the rename leaves the target as it was and no temp file behind.
The temp file is created with the process's umask, like a plain write.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import uuid
from typing import Any, Iterator


@contextlib.contextmanager
def replacing(path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A temp path beside ``path`` for the block to write; on success it replaces ``path``.

    For writers that need a path of their own (a plot library, a streamed
    download checked before it lands); on any error the temp file is removed
    and ``path`` is untouched.
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: pathlib.Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file in the same dir and rename."""
    with replacing(path) as tmp:
        tmp.write_text(text)


def atomic_write_json(path: pathlib.Path, doc: Any) -> None:
    atomic_write_text(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")


def read_json(path: pathlib.Path, default: Any = None) -> Any:
    """The JSON document at ``path``, or ``default`` if missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return default
