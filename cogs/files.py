"""Atomic file writes: readers (status, Prometheus file_sd, HAProxy reload) never see half a
file."""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
from typing import Any


def atomic_write_text(path: pathlib.Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file in the same dir and rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_json(path: pathlib.Path, doc: Any) -> None:
    atomic_write_text(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")


def read_json(path: pathlib.Path, default: Any = None) -> Any:
    """The JSON document at ``path``, or ``default`` if missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return default
