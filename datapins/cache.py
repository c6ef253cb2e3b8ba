"""A content-addressed file cache: `CACHE/sha256/ab/abcdef…`, one file per content.

A file enters the cache only after its bytes, streamed from the source into a
temporary file beside its final place, hashed to the pinned digest; then it is renamed
into place (atomic, so a crash leaves no half file under a digest's name) and made
read-only. So an entry's name is its checked content, and a hit is taken on its name
and size without reading it again: an unchanged image is never fetched twice. The
workspace gets hard links to the entries (a copy where the cache is on another
filesystem); read-only entries mean a training script that writes into its data gets
an error instead of silently corrupting the cache.
"""

from __future__ import annotations

import os
import pathlib
import shutil
from typing import Iterator

from cogs.files import replacing
from datapins.errors import DataDigestMismatch
from datapins.lock import FilePin
from datapins.sources import Source, hash_chunks

__all__ = ["Cache"]


class Cache:
    """The cache directory; `fetch` returns an entry's path and whether it was a hit."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root

    def entry(self, sha256: str) -> pathlib.Path:
        """Where the content with this digest lives."""
        return self.root / "sha256" / sha256[:2] / sha256

    def fetch(self, source: Source, pin: FilePin) -> tuple[pathlib.Path, bool]:
        """The pinned file in the cache: (path, hit). Fetches and verifies on a miss."""
        path = self.entry(pin.sha256)
        try:
            if path.stat().st_size == pin.size:
                return path, True
        except FileNotFoundError:
            pass
        with replacing(path) as tmp:
            with open(tmp, "wb") as fh:
                def copying() -> Iterator[bytes]:
                    for chunk in source.chunks(pin.path):
                        fh.write(chunk)
                        yield chunk
                sha, size = hash_chunks(copying())
            if sha != pin.sha256 or size != pin.size:
                raise DataDigestMismatch(
                    f"{source.uri}/{pin.path}: the pinned file was sha256 {pin.sha256} "
                    f"({pin.size} bytes), the source now has sha256 {sha} ({size} bytes); "
                    "the data changed under its pin: snapshot it again, or restore it")
            os.chmod(tmp, 0o444)
        return path, False

    @staticmethod
    def place(entry: pathlib.Path, dest: pathlib.Path) -> None:
        """Put a cache entry at dest: a hard link, or a copy across filesystems."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(entry, dest)
        except OSError:
            shutil.copyfile(entry, dest)
