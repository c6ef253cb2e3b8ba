"""`prepare(lock, dest, cache)`: exactly the pinned files in a workspace, checked.

Three stages, each finished before the next begins, so a bad dataset leaves no
workspace half-made: fetch every pinned file into the cache (verifying its digest on
the way in), validate (schema, ids, categories, boxes, decoding, overlap between
splits), then link the files into `dest` as the COCO layout (`annotations/<split>.json`,
`images/<file_name>`) with the lock beside them (`dest/datalock.json`). A second
prepare of the same lock into the same `dest` finds that lock and does nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
from typing import Iterator, Sequence

from datapins.cache import Cache
from datapins.coco import parse_coco
from datapins.errors import DataDigestMismatch, DataError
from datapins.lock import DataLock, dumps, read_lock
from datapins.snapshot import IMAGES
from datapins.sources import Source, bounded_map, hash_chunks
from datapins.validate import Problem, check_images, check_overlap, check_split

__all__ = ["PrepareReport", "prepare", "verify_placed"]

MARKER = "datalock.json"
_SHOWN = 20  # problems listed in the error; the count says how many more


@dataclasses.dataclass(frozen=True)
class PrepareReport:
    """What prepare did: files pinned, fetched from the source, found in the cache."""

    files: int
    fetched: int
    hits: int
    bytes_fetched: int
    skipped: bool = False


def _refuse(lock: DataLock, problems: Sequence[Problem]) -> DataError:
    lines = [f"dataset {lock.name} ({lock.digest[:19]}…): {len(problems)} problem(s):"]
    lines += [f"  {p}" for p in problems[:_SHOWN]]
    if len(problems) > _SHOWN:
        lines.append(f"  … and {len(problems) - _SHOWN} more")
    return DataError("\n".join(lines))


def prepare(lock: DataLock, dest: pathlib.Path, cache: Cache, source: Source,
            labels: Sequence[str] | None = None, full_decode: bool = False,
            workers: int = 8) -> PrepareReport:
    """Fetch, verify, validate and place the pinned dataset; DataError if it is unfit."""
    marker = dest / MARKER
    if marker.is_file():
        try:
            if read_lock(marker).digest == lock.digest:
                n = sum(1 + len(s.images) for s in lock.splits.values())
                return PrepareReport(files=n, fetched=0, hits=0, bytes_fetched=0, skipped=True)
        except DataError:
            pass
    if dest.exists() and any(dest.iterdir()):
        raise DataError(f"{dest}: not empty and not a workspace of this lock "
                        f"({lock.digest}); give an empty or new directory")

    # Each pinned file once; its cache entry is found again from its digest, so no
    # per-file path object outlives the fetch (100k of them were tens of MB).
    unique = {(p.path, p.sha256): p for split in lock.splits.values()
              for p in (split.annotations, *split.images)}
    misses = bytes_fetched = 0
    # closing: zip stops at the pins' end without finishing `hits` (bounded_map's docstring)
    with contextlib.closing(bounded_map(lambda p: cache.fetch(source, p)[1],
                                        unique.values(), workers)) as hits:
        for pin, hit in zip(unique.values(), hits):
            if not hit:
                misses += 1
                bytes_fetched += pin.size

    problems: list[Problem] = []
    for split in lock.splits.values():  # one parsed annotation file in memory at a time
        coco = parse_coco(cache.entry(split.annotations.sha256).read_bytes(),
                          split.annotations.path)
        pinned = {p.path: p.sha256 for p in split.images}
        images: list[tuple[str, pathlib.Path]] = []
        for img in coco.images:
            rel = f"{IMAGES}/{img.file_name}"
            if rel not in pinned:
                problems.append(Problem(split.annotations.path, f"image id {img.id}",
                                        f"{rel} is not pinned in the lock"))
            else:
                images.append((img.file_name, cache.entry(pinned[rel])))
        seen = check_images(images, full=full_decode)
        del images, pinned
        problems += check_split(split.annotations.path, coco, labels, seen)
    problems += check_overlap({
        name: {p.sha256: p.path for p in split.images} for name, split in lock.splits.items()})
    if problems:
        raise _refuse(lock, problems)

    for pin in unique.values():
        Cache.place(cache.entry(pin.sha256), dest / pin.path)
    marker.write_text(dumps(lock))
    return PrepareReport(files=len(unique), fetched=misses, hits=len(unique) - misses,
                         bytes_fetched=bytes_fetched)


def _chunks(path: pathlib.Path, size: int = 1 << 20) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while chunk := fh.read(size):
            yield chunk


def verify_placed(lock: DataLock, dest: pathlib.Path, splits: Sequence[str]) -> None:
    """Check that `splits` of `lock` are in `dest` as pinned, byte for byte, or raise
    `DataDigestMismatch` naming each file that is not.

    A workspace is checked once, when `prepare` places it; whatever runs after it on the
    same volume (the training job runs the pushed repo's own code) could replace a file
    (issue 41, finding 5: the val annotations were rewritten and a failing candidate
    passed the gate). So a reader that judges with the data (evaluation) checks again
    what it reads. Files are hashed as they are now, through symlinks; extra files are
    not looked at (nothing reads a file the lock does not name)."""
    wrong = []
    for name in splits:
        split = lock.splits[name]
        for pin in (split.annotations, *split.images):
            path = dest / pin.path
            try:
                sha, size = hash_chunks(_chunks(path))
            except OSError as exc:
                wrong.append(f"{path}: cannot be read ({exc.strerror or exc})")
                continue
            if (sha, size) != (pin.sha256, pin.size):
                wrong.append(f"{path}: sha256 {sha} ({size} bytes), pinned {pin.sha256} "
                             f"({pin.size} bytes)")
    if wrong:
        shown = [f"  {w}" for w in wrong[:_SHOWN]]
        if len(wrong) > _SHOWN:
            shown.append(f"  ... and {len(wrong) - _SHOWN} more")
        raise DataDigestMismatch(
            f"dataset {lock.name} ({lock.digest[:19]}...): {len(wrong)} file(s) of "
            f"{', '.join(splits)} changed after prepare-data verified them (a step after it "
            "wrote to the prepared data); nothing is judged on them:\n" + "\n".join(shown))
