"""The dataset lock file: its typed shape, its digest, and the one place it is read and written.

JSON (`format: 1`), one image per line so a change reviews as a short git diff:
`name`, `source`, `digest` and per split the annotation file, the class counts and every
image's path, size and sha256; a dataset of another layout (`datapins.layouts`) says so
in `layout` and per split `image_root`, `format` and `files`, written only when not the
default. `digest` hashes the canonical JSON of `splits` alone, so moving or renaming a
dataset keeps it. The format and why JSON: docs/guides/data-pins.md.
"""

from __future__ import annotations

import hashlib
import pathlib
import re
from typing import Iterator, Literal

import orjson
import pydantic
import pydantic.dataclasses

from cogs.files import atomic_write_text
from cogs.text import printable
from datapins.errors import DataError

__all__ = ["DataLock", "FilePin", "SplitPin", "dataset_digest", "read_lock", "write_lock"]

_SHA256 = r"^[0-9a-f]{64}$"


def _leaves_the_source(path: str) -> bool:
    """An absolute path, a `..` or a backslash: joined to a root, it could point outside."""
    return path.startswith("/") or ".." in pathlib.PurePosixPath(path).parts or "\\" in path


@pydantic.dataclasses.dataclass(frozen=True, slots=True,
                                config=pydantic.ConfigDict(extra="forbid"))
class FilePin:
    """One pinned file: its path relative to the source root, its size and content digest.

    A slotted pydantic dataclass rather than a `BaseModel`: validated the same, but 100k
    of them hold 28 MB instead of 72 MB and build in a third of the time.
    """

    path: str = pydantic.Field(min_length=1)
    size: int = pydantic.Field(ge=0)
    sha256: str = pydantic.Field(pattern=_SHA256)

    @pydantic.field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        # A pinned path is joined to the source root and to the workspace: never let it out.
        if _leaves_the_source(value):
            raise ValueError(f"{value!r} must be a relative path inside the source")
        return value


IMAGE_ROOT = "images"  # where this project's own layout keeps a split's images


class SplitPin(pydantic.BaseModel):
    """One split: its annotation file, annotation counts per class, and its images."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    annotations: FilePin
    classes: dict[str, int]
    images: list[FilePin]
    image_root: str = IMAGE_ROOT
    """The folder (relative to the source root, '' for the root) the file names are under."""
    format: Literal["coco", "voc"] = "coco"
    """`coco`: the annotation file is COCO JSON; `voc`: PaddleDetection's VOC list file."""
    files: list[FilePin] = pydantic.Field(default_factory=list)
    """Other pinned files the annotations are read from (VOC's XML files, its label list)."""

    @pydantic.field_validator("image_root")
    @classmethod
    def _root(cls, value: str) -> str:
        if _leaves_the_source(value):
            raise ValueError(f"{value!r} must be a relative folder inside the source")
        return value.strip("/")

    def image_path(self, file_name: str) -> str:
        """Where an annotation's `file_name` lives in the source."""
        return f"{self.image_root}/{file_name}" if self.image_root else file_name


class DataLock(pydantic.BaseModel):
    """A dataset pinned by content (the lock file, `format: 1`)."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    format: Literal[1] = 1
    kind: Literal["DataLock"] = "DataLock"
    name: str = pydantic.Field(min_length=1)
    source: str = pydantic.Field(min_length=1)
    digest: str = pydantic.Field(pattern=r"^sha256:[0-9a-f]{64}$")
    layout: str = "coco"
    """The layout the dataset was read from (`datapins.layouts`); `coco` is this project's."""
    splits: dict[str, SplitPin]

    @pydantic.field_validator("name")
    @classmethod
    def _printable_name(cls, value: str) -> str:
        # The name is shown to reviewers (the PR body, `mlops data diff`, the UI) and is
        # written by whoever pushed the lock: one line of printable text.
        if printable(value, lines=False) != value:
            raise ValueError(f"{printable(value, lines=False)!r}: one line of printable text "
                             "only (no control or bidi characters)")
        return value

    @pydantic.field_validator("splits")
    @classmethod
    def _split_names(cls, value: dict[str, SplitPin]) -> dict[str, SplitPin]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                raise ValueError(f"split name {name!r}: letters, digits, '_', '.', '-' only")
        if not value:
            raise ValueError("a dataset has at least one split")
        return value


def _canonical_pieces(splits: dict[str, SplitPin]) -> Iterator[bytes]:
    """The canonical serialisation, piece by piece.

    Byte for byte `orjson.dumps({split: split_as_plain_data}, OPT_SORT_KEYS)` (a test
    holds them equal), written one pin at a time so 100k images never exist as one
    big dict or one big string.
    """
    def pin(f: FilePin) -> bytes:
        return orjson.dumps({"path": f.path, "sha256": f.sha256, "size": f.size})

    yield b"{"
    for i, name in enumerate(sorted(splits)):
        split = splits[name]
        yield (b"," if i else b"") + orjson.dumps(name) + b':{"annotations":'
        yield pin(split.annotations)
        yield b',"classes":' + orjson.dumps(split.classes, option=orjson.OPT_SORT_KEYS)
        if split.files:  # keys in sorted order: annotations, classes, files, format, ...
            yield b',"files":['
            for j, other in enumerate(split.files):
                yield (b"," if j else b"") + pin(other)
            yield b"]"
        if split.format != "coco":
            yield b',"format":' + orjson.dumps(split.format)
        if split.image_root != IMAGE_ROOT:
            yield b',"image_root":' + orjson.dumps(split.image_root)
        yield b',"images":['
        for j, image in enumerate(split.images):
            yield (b"," if j else b"") + pin(image)
        yield b"]}"
    yield b"}"


def dataset_digest(splits: dict[str, SplitPin]) -> str:
    """The dataset digest: sha256 over the canonical serialisation of the splits."""
    digest = hashlib.sha256()
    for piece in _canonical_pieces(splits):
        digest.update(piece)
    return "sha256:" + digest.hexdigest()


def make_lock(name: str, source: str, splits: dict[str, SplitPin],
              layout: str = "coco") -> DataLock:
    """A lock for these splits, images sorted by path, its digest computed."""
    ordered = {
        split: SplitPin(annotations=pin.annotations, classes=dict(sorted(pin.classes.items())),
                        images=sorted(pin.images, key=lambda f: f.path),
                        image_root=pin.image_root, format=pin.format,
                        files=sorted(pin.files, key=lambda f: f.path))
        for split, pin in sorted(splits.items())
    }
    return DataLock(name=name, source=source, digest=dataset_digest(ordered), splits=ordered,
                    layout=layout)


def _line(obj: object) -> str:
    # orjson writes a dataclass's fields in their declared order: path, size, sha256
    return orjson.dumps(obj).decode()


def dumps(lock: DataLock) -> str:
    """The lock file's text: stable key order, one image per line."""
    out = ["{", f'  "format": {lock.format},', f'  "kind": {_line(lock.kind)},',
           f'  "name": {_line(lock.name)},', f'  "source": {_line(lock.source)},',
           f'  "digest": {_line(lock.digest)},']
    if lock.layout != "coco":
        out.append(f'  "layout": {_line(lock.layout)},')
    out.append('  "splits": {')
    names = list(lock.splits)
    for i, name in enumerate(names):
        split = lock.splits[name]
        out.append(f"    {_line(name)}: {{")
        out.append(f'      "annotations": {_line(split.annotations)},')
        out.append(f'      "classes": {_line(split.classes)},')
        if split.image_root != IMAGE_ROOT:
            out.append(f'      "image_root": {_line(split.image_root)},')
        if split.format != "coco":
            out.append(f'      "format": {_line(split.format)},')
        if split.files:
            out.append('      "files": [')
            out.append(",\n".join(f"        {_line(pin)}" for pin in split.files))
            out.append("      ],")
        out.append('      "images": [')
        images = [f"        {_line(pin)}" for pin in split.images]
        if images:
            out.append(",\n".join(images))
        out.append("      ]")
        out.append("    }" + ("," if i < len(names) - 1 else ""))
    out.extend(["  }", "}"])
    return "\n".join(out) + "\n"


def write_lock(lock: DataLock, path: pathlib.Path) -> None:
    """Write the lock file (atomically: a reader never sees half a lock)."""
    atomic_write_text(path, dumps(lock))


def read_lock(path: pathlib.Path) -> DataLock:
    """Read and check a lock file; a bad one is a DataError naming the file and field."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such lock file") from None
    try:  # straight from the bytes: no intermediate dict of 100k entries
        lock = DataLock.model_validate_json(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":
            raise DataError(f"{path}: not JSON ({first['msg']})") from None
        where = ".".join(str(p) for p in first["loc"])
        raise DataError(f"{path}: {where}: {first['msg']}") from None
    expected = dataset_digest(lock.splits)
    if lock.digest != expected:
        raise DataError(f"{path}: digest {lock.digest} does not match its splits ({expected}); "
                        "the lock was edited by hand: run `mlops data snapshot` again")
    return lock
