"""Where a dataset is read from: a Source of two methods, one module per backend.

A directory (local disk, a NAS mount, a mounted PVC) is the embedded default; an
`s3://bucket/prefix` URI is read with boto3 (`datapins.s3`). Both stream: a file is
read in 1 MiB chunks, never whole, so hashing 100k images keeps memory flat.
An unknown scheme is an error naming the choices, not a silent fallback to a path.
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import os
import pathlib
from typing import Callable, Generator, Iterable, Iterator, Protocol, TypeVar
from urllib.parse import urlparse

from datapins.errors import DataError, DataNotFound

__all__ = ["CHUNK", "DirectorySource", "Source", "bounded_map", "hash_chunks", "open_source"]

CHUNK = 1 << 20
T = TypeVar("T")
R = TypeVar("R")


class Source(Protocol):
    """A dataset's home; paths are relative, '/'-separated, under the source root."""

    uri: str

    def list(self, prefix: str) -> list[str]:
        """Paths of the files under `prefix` (one level and below), sorted."""
        ...

    def chunks(self, path: str) -> Iterator[bytes]:
        """The file's bytes in chunks; DataNotFound if it is not there."""
        ...


class DirectorySource:
    """A dataset in a directory: local disk, NAS mount or PVC."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root.resolve()
        self.uri = self.root.as_uri()

    def list(self, prefix: str) -> list[str]:
        """Files under root/prefix, relative to root."""
        base = self.root / prefix
        if not base.is_dir():
            return []
        return sorted(p.relative_to(self.root).as_posix() for p in base.rglob("*") if p.is_file())

    def chunks(self, path: str) -> Iterator[bytes]:
        """Stream root/path."""
        try:
            fh = open(self.root / path, "rb")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise DataNotFound(f"{self.uri}/{path}: no such file") from None
        with fh:
            while chunk := fh.read(CHUNK):
                yield chunk


def hash_chunks(chunks: Iterator[bytes]) -> tuple[str, int]:
    """(sha256 hex, size) of a stream, holding one chunk at a time."""
    digest, size = hashlib.sha256(), 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def bounded_map(fn: Callable[[T], R], items: Iterable[T], workers: int,
                window: int = 512) -> Generator[R, None, None]:
    """`fn` over `items` on `workers` threads, results in order, at most `window` in flight.

    `Executor.map` submits every item at once: a future per file, 26 MB for 16k files,
    growing with the dataset; this keeps a fixed window of them instead.

    A caller that may stop before the last result closes the generator
    (`contextlib.closing`): left suspended, it keeps its threads until the garbage
    collector finalizes it, in whichever thread allocates then, and if that is a thread
    being started, joining the pool there deadlocks on threading's own lock (CPython
    3.11; seen as a hung `prepare` test). Closing it cancels what has not started.
    """
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        pending: collections.deque[concurrent.futures.Future[R]] = collections.deque()
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) >= window:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


def open_source(uri: str, endpoint_url: str | None = None) -> Source:
    """The Source for a URI: `s3://bucket/prefix`, `file:///path` or a plain path.

    `endpoint_url` (or `$MLOPS_DATA_ENDPOINT_URL`) points boto3 at a MinIO/OSS-style
    store; credentials come only from the environment (boto3's chain), never argv.
    """
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        from datapins.s3 import S3Source

        return S3Source(uri, endpoint_url or os.environ.get("MLOPS_DATA_ENDPOINT_URL") or None)
    if parsed.scheme == "file":
        path = pathlib.Path(parsed.path)
    elif parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        path = pathlib.Path(uri)
    else:
        raise DataError(f"source {uri!r}: unknown scheme {parsed.scheme!r} "
                        "(choices: a directory path, file://PATH, s3://BUCKET/PREFIX)")
    if not path.is_dir():
        raise DataError(f"source {uri!r}: no such directory")
    return DirectorySource(path)
