"""`snapshot(source)`: read a dataset where it lies and pin it by content in a DataLock.

The dataset's layout is found first (`datapins.layouts`: this project's COCO layout, COCO
2017's own, or what a PaddleDetection dataset YAML says); each split is then one
annotation file and the images it names (files nobody references are not pinned), plus,
for a VOC split, its XML files and label list. Images are hashed on a small thread pool,
streaming, so reading 100k files from S3 is bound by the pool's width, not by one request
at a time, and memory holds one chunk per thread. The snapshot parses what it needs (file
names and class names) but judges nothing else: validation is prepare's job, so a lock of
a bad dataset can be made, committed and refused with the reason at `prepare`.
"""

from __future__ import annotations

import collections
import pathlib

from datapins.coco import parse_coco
from datapins.errors import DataError
from datapins.layouts import Layout, SplitSource, detect
from datapins.lock import IMAGE_ROOT, DataLock, FilePin, SplitPin, make_lock
from datapins.sources import Source, bounded_map, hash_chunks
from datapins.voc import parse_list, parse_xml

__all__ = ["IMAGES", "snapshot"]

IMAGES = IMAGE_ROOT


def _inside(name: str, where: str, what: str) -> str:
    """`name` as a relative path; DataError (naming `where`) if it would leave its folder."""
    parts = pathlib.PurePosixPath(name).parts
    if not name or name.startswith("/") or "\\" in name or ".." in parts:
        raise DataError(f"{where}: {what} {name!r} is not a relative path inside the dataset")
    return name


def _join(root: str, name: str) -> str:
    return f"{root}/{name}" if root else name


def _pin(source: Source, path: str) -> FilePin:
    sha, size = hash_chunks(source.chunks(path))
    return FilePin(path=path, size=size, sha256=sha)


def _pin_bytes(path: str, data: bytes) -> FilePin:
    return FilePin(path=path, size=len(data), sha256=hash_chunks(iter([data]))[0])


def _coco_split(source: Source, spec: SplitSource, workers: int) -> SplitPin:
    data = b"".join(source.chunks(spec.annotations))  # parsed whole anyway; hashed from memory
    ann_pin = _pin_bytes(spec.annotations, data)
    coco = parse_coco(data, spec.annotations)
    names = {c.id: c.name for c in coco.categories}
    classes = collections.Counter(
        names.get(a.category_id, f"<unknown category id {a.category_id}>")
        for a in coco.annotations)
    where = f"{spec.annotations}: image id"
    paths = sorted({_join(spec.image_root,
                          _inside(img.file_name, f"{where} {img.id}", "file_name"))
                    for img in coco.images})
    del coco, data  # not held while the images are hashed
    images = list(bounded_map(lambda p: _pin(source, p), paths, workers))
    return SplitPin(annotations=ann_pin, classes=dict(classes), images=images,
                    image_root=spec.image_root)


def _voc_split(source: Source, spec: SplitSource, workers: int) -> SplitPin:
    data = b"".join(source.chunks(spec.annotations))
    ann_pin = _pin_bytes(spec.annotations, data)
    pairs = parse_list(data, spec.annotations)
    files: list[FilePin] = []
    if spec.label_list:
        files.append(_pin(source, spec.label_list))
    classes: collections.Counter[str] = collections.Counter()

    def xml(pair: tuple[str, str]) -> tuple[FilePin, list[str]]:
        path = _join(spec.image_root, _inside(pair[1], spec.annotations, "xml file"))
        body = b"".join(source.chunks(path))
        return _pin_bytes(path, body), [o.name for o in parse_xml(body, path).objects]

    for pin, names in bounded_map(xml, pairs, workers):
        files.append(pin)
        classes.update(names)
    paths = sorted({_join(spec.image_root, _inside(img, spec.annotations, "image"))
                    for img, _ in pairs})
    images = list(bounded_map(lambda p: _pin(source, p), paths, workers))
    return SplitPin(annotations=ann_pin, classes=dict(classes), images=images,
                    image_root=spec.image_root, format="voc",
                    files=list({f.path: f for f in files}.values()))


def snapshot(source: Source, name: str, workers: int = 8,
             layout: Layout | None = None) -> DataLock:
    """Pin every split's annotation file and every image it names.

    `layout`: where the splits are (`datapins.layouts.read_ppdet_config`); None finds it.
    """
    layout = layout or detect(source)
    splits: dict[str, SplitPin] = {}
    for spec in layout.splits:
        read = _voc_split if spec.format == "voc" else _coco_split
        splits[spec.split] = read(source, spec, workers)
    return make_lock(name, source.uri, splits, layout=layout.name)
