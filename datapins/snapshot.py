"""`snapshot(source)`: read a COCO dataset and pin it by content in a DataLock.

Each split is one `annotations/<split>.json`; its images are the files its COCO
`file_name`s name under `images/` (files nobody references are not pinned). Images
are hashed on a small thread pool, streaming, so reading 100k files from S3 is bound
by the pool's width, not by one request at a time, and memory holds one chunk per
thread. The snapshot parses the schema (it needs the file names and class names) but
judges nothing else: validation is prepare's job, so a lock of a bad dataset can be
made, committed and refused with the reason at `prepare`.
"""

from __future__ import annotations

import collections
import pathlib

from datapins.coco import parse_coco
from datapins.errors import DataError
from datapins.lock import DataLock, FilePin, SplitPin, make_lock
from datapins.sources import Source, bounded_map, hash_chunks

__all__ = ["snapshot", "split_names"]

ANNOTATIONS = "annotations"
IMAGES = "images"


def split_names(source: Source) -> dict[str, str]:
    """{split: annotation path} for every `annotations/<split>.json` in the source."""
    found = {pathlib.PurePosixPath(p).stem: p for p in source.list(ANNOTATIONS)
             if p.endswith(".json") and p.count("/") == 1}
    if not found:
        raise DataError(f"{source.uri}: no {ANNOTATIONS}/<split>.json (the COCO layout: "
                        f"{ANNOTATIONS}/train.json, {ANNOTATIONS}/val.json, {IMAGES}/...)")
    return found


def image_path(file_name: str) -> str:
    """Where a COCO `file_name` lives in the source ('' if it would leave `images/`)."""
    parts = pathlib.PurePosixPath(file_name).parts
    if file_name.startswith("/") or "\\" in file_name or ".." in parts:
        return ""
    return f"{IMAGES}/{file_name}"


def _pin(source: Source, path: str) -> FilePin:
    sha, size = hash_chunks(source.chunks(path))
    return FilePin(path=path, size=size, sha256=sha)


def snapshot(source: Source, name: str, workers: int = 8) -> DataLock:
    """Pin every split's annotation file and every image it names."""
    splits: dict[str, SplitPin] = {}
    for split, ann_path in sorted(split_names(source).items()):
        data = b"".join(source.chunks(ann_path))  # parsed whole anyway; hashed from memory
        ann_pin = FilePin(path=ann_path, size=len(data),
                          sha256=hash_chunks(iter([data]))[0])
        coco = parse_coco(data, ann_path)
        names = {c.id: c.name for c in coco.categories}
        classes = collections.Counter(
            names.get(a.category_id, f"<unknown category id {a.category_id}>")
            for a in coco.annotations)
        for img in coco.images:
            if not image_path(img.file_name):
                raise DataError(f"{ann_path}: image id {img.id}: file_name "
                                f"{img.file_name!r} is not a relative path under {IMAGES}/")
        paths = sorted({image_path(img.file_name) for img in coco.images})
        del coco, data  # not held while the images are hashed
        images = list(bounded_map(lambda p: _pin(source, p), paths, workers))
        splits[split] = SplitPin(annotations=ann_pin, classes=dict(classes), images=images)
    return make_lock(name, source.uri, splits)
