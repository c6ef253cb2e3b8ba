"""`prepare(lock, dest, cache)`: exactly the pinned files in a workspace, checked.

Three stages, each finished before the next begins, so a bad dataset leaves no
workspace half-made: fetch every pinned file into the cache (verifying its digest on
the way in), validate (schema, ids, categories, boxes, decoding, overlap between
splits), then link the files into `dest` as the COCO layout training reads
(`annotations/<split>.json`, `images/<file_name>`) with the lock beside them
(`dest/datalock.json`), whatever layout the lock was made from (`datapins.layouts`): a
split's images come from its `image_root`, and a VOC split's annotations are written as
COCO from its pinned XML files (`datapins.voc`). A second prepare of the same lock into
the same `dest` finds that lock and does nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
from typing import Iterator, Sequence

from datapins.cache import Cache
from datapins.coco import CocoFile, parse_coco
from datapins.errors import DataDigestMismatch, DataError
from datapins.lock import DataLock, SplitPin, dumps, read_lock
from datapins.snapshot import IMAGES
from datapins.sources import Source, bounded_map, hash_chunks
from datapins.validate import Problem, check_images, check_overlap, check_split
from datapins.voc import parse_labels, parse_list, parse_xml, to_coco

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
              for p in (split.annotations, *split.files, *split.images)}
    placed = _placement(lock)  # before any fetch: a clash needs no download to be seen
    misses = bytes_fetched = 0
    # closing: zip stops at the pins' end without finishing `hits` (bounded_map's docstring)
    with contextlib.closing(bounded_map(lambda p: cache.fetch(source, p)[1],
                                        unique.values(), workers)) as hits:
        for pin, hit in zip(unique.values(), hits):
            if not hit:
                misses += 1
                bytes_fetched += pin.size

    problems: list[Problem] = []
    converted: dict[str, bytes] = {}  # split -> its COCO annotations, made from VOC
    for name, split in lock.splits.items():  # one parsed annotation file in memory at a time
        coco, made, voc_problems = _annotations(split, cache)
        problems += voc_problems
        if made is not None:
            converted[name] = made
        pinned = {p.path: p.sha256 for p in split.images}
        images: list[tuple[str, pathlib.Path]] = []
        for img in coco.images:
            rel = split.image_path(img.file_name)
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

    for target, sha256 in placed.items():
        Cache.place(cache.entry(sha256), dest / target)
    for name, data in converted.items():
        (dest / "annotations").mkdir(parents=True, exist_ok=True)
        (dest / "annotations" / f"{name}.json").write_bytes(data)
    marker.write_text(dumps(lock))
    return PrepareReport(files=len(unique), fetched=misses, hits=len(unique) - misses,
                         bytes_fetched=bytes_fetched)


def _annotations(split: SplitPin, cache: Cache,
                 ) -> tuple[CocoFile, bytes | None, list[Problem]]:
    """(parsed COCO, the COCO bytes when made from VOC, the conversion's problems)."""
    if split.format == "coco":
        return (parse_coco(cache.entry(split.annotations.sha256).read_bytes(),
                           split.annotations.path), None, [])
    files = {f.path: f.sha256 for f in split.files}
    pairs = parse_list(cache.entry(split.annotations.sha256).read_bytes(), split.annotations.path)
    xml_paths = {split.image_path(xml) for _, xml in pairs}
    label_files = [p for p in files if p not in xml_paths]
    labels = parse_labels(cache.entry(files[label_files[0]]).read_bytes() if label_files
                          else None)
    entries = []
    for image, xml in pairs:
        path = split.image_path(xml)
        entries.append((image, path, parse_xml(cache.entry(files[path]).read_bytes(), path)))
    data, problems = to_coco(entries, labels)
    return parse_coco(data, split.annotations.path), data, problems


def _placement(lock: DataLock, names: Sequence[str] | None = None) -> dict[str, str]:
    """{path under dest: sha256} of every file training reads: each split's COCO annotations
    at `annotations/<split>.json` (a VOC split's are written, not linked) and its images at
    `images/<file_name>`; DataError when two splits would put different files at one path."""
    placed: dict[str, str] = {}
    owner: dict[str, str] = {}

    def put(target: str, sha256: str, split: str) -> None:
        if placed.setdefault(target, sha256) != sha256:
            raise DataError(f"splits {owner[target]} and {split} both put a file at {target} "
                            "with different content; rename one (its file_name)")
        owner.setdefault(target, split)

    for name, split in lock.splits.items():
        if names is not None and name not in names:
            continue
        if split.format == "coco":
            put(f"annotations/{name}.json", split.annotations.sha256, name)
        cut = len(split.image_root) + 1 if split.image_root else 0
        for pin in split.images:
            put(f"{IMAGES}/{pin.path[cut:]}", pin.sha256, name)
    return placed


def _sha256(path: pathlib.Path, size: int = 1 << 20) -> str:
    def chunks() -> Iterator[bytes]:
        with open(path, "rb") as fh:
            while chunk := fh.read(size):
                yield chunk
    return hash_chunks(chunks())[0]


def verify_placed(lock: DataLock, dest: pathlib.Path, splits: Sequence[str],
                  cache: Cache | None = None) -> list[str]:
    """Check that `splits` of `lock` are in `dest` as `prepare` placed them, byte for byte,
    or raise `DataDigestMismatch` naming each file that is not; returns notes on what
    could not be checked here.

    A workspace is checked once, when `prepare` places it; whatever runs after it on the
    same volume (the training job runs the pushed repo's own code) could replace a file
    (the val annotations were rewritten and a failing candidate
    passed the gate). So a reader that judges with the data (evaluation) checks again
    what it reads. Files are hashed as they are now, through symlinks; extra files are
    not looked at (nothing reads a file the lock does not name). A VOC split's COCO file
    is made, not pinned: it is made again from the cache's pinned files when `cache`
    has them, else named in the notes."""
    expected = _placement(lock, splits)
    notes = []
    for name in splits:
        split = lock.splits[name]
        if split.format == "coco":
            continue
        try:
            made = _annotations(split, cache)[1] if cache is not None else None
        except (OSError, DataError):
            made = None
        if made is None:
            notes.append(f"{dest / 'annotations' / f'{name}.json'}: made from VOC files the "
                         "cache here does not hold; not checked again")
        else:
            expected[f"annotations/{name}.json"] = hash_chunks(iter([made]))[0]
    wrong = []
    for target, sha256 in expected.items():
        path = dest / target
        try:
            found = _sha256(path)
        except OSError as exc:
            wrong.append(f"{path}: cannot be read ({exc.strerror or exc})")
            continue
        if found != sha256:
            wrong.append(f"{path}: sha256 {found}, prepared {sha256}")
    if wrong:
        shown = [f"  {w}" for w in wrong[:_SHOWN]]
        if len(wrong) > _SHOWN:
            shown.append(f"  ... and {len(wrong) - _SHOWN} more")
        raise DataDigestMismatch(
            f"dataset {lock.name} ({lock.digest[:19]}...): {len(wrong)} file(s) of "
            f"{', '.join(splits)} changed after prepare-data verified them (a step after it "
            "wrote to the prepared data); nothing is judged on them:\n" + "\n".join(shown))
    return notes
