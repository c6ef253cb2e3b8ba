"""Is a fetched dataset fit to train on? Pure checks over parsed data, then one I/O pass.

`check_split` and `check_overlap` take parsed COCO files and digests and return the
problems found, each naming the file and the entry; they read nothing. `check_images`
opens each image with Pillow. By default that is `Image.verify()`, which reads the
header and walks the file's structure without decoding pixels: for PNG it checks every
chunk's CRC, so a flipped or truncated byte is caught; for JPEG it checks little more
than the header, so a truncated JPEG body passes. `full=True` decodes every pixel
(`Image.load()`), which catches that too at the cost of a real decode per image.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import pathlib
from typing import Iterable, Mapping, Sequence

from datapins.coco import CocoFile

__all__ = ["ImageSeen", "Problem", "check_images", "check_overlap", "check_split"]

# A box may touch the image's edge up to float rounding, not cross it.
_EDGE = 1e-6


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong: the file, the entry in it, and what."""

    file: str
    entry: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.entry}: {self.message}"


@dataclasses.dataclass(frozen=True, slots=True)
class ImageSeen:
    """What opening an image found: its decoded size, or why it would not open."""

    width: int = 0
    height: int = 0
    error: str = ""


def _dupes(ids: Iterable[int]) -> list[int]:
    return sorted(k for k, n in collections.Counter(ids).items() if n > 1)


def check_split(file: str, coco: CocoFile, labels: Sequence[str] | None,
                seen: Mapping[str, ImageSeen] | None = None) -> list[Problem]:
    """Schema-level problems of one split's annotation file.

    `labels` is the model's label list (None: not checked); `seen` maps a COCO
    `file_name` to what opening the image found (None: images not checked here).
    """
    out: list[Problem] = []
    for what, ids in (("image", [i.id for i in coco.images]),
                      ("annotation", [a.id for a in coco.annotations]),
                      ("category", [c.id for c in coco.categories])):
        out += [Problem(file, f"{what} id {d}", f"duplicate {what} id") for d in _dupes(ids)]
    for name, n in collections.Counter(i.file_name for i in coco.images).items():
        if n > 1:
            out.append(Problem(file, f"file_name {name!r}", f"named by {n} image entries"))
    categories = {c.id: c.name for c in coco.categories}
    if labels is not None:
        known = set(labels)
        out += [Problem(file, f"category id {c.id}",
                        f"unknown category {c.name!r} (the model's labels: {', '.join(labels)})")
                for c in coco.categories if c.name not in known]
    images = {i.id: i for i in coco.images}
    for img in coco.images:
        got = (seen or {}).get(img.file_name)
        if got is None:
            continue
        if got.error:
            out.append(Problem(file, f"image id {img.id} ({img.file_name})",
                               f"does not decode: {got.error}"))
        elif (got.width, got.height) != (img.width, img.height):
            out.append(Problem(file, f"image id {img.id} ({img.file_name})",
                               f"is {got.width}x{got.height}, the annotation file says "
                               f"{img.width}x{img.height}"))
    for ann in coco.annotations:
        entry = f"annotation id {ann.id} (image id {ann.image_id})"
        if ann.category_id not in categories:
            out.append(Problem(file, entry, f"unknown category id {ann.category_id} "
                                            f"(categories: {sorted(categories)})"))
        owner = images.get(ann.image_id)
        if owner is None:
            out.append(Problem(file, entry, f"no image with id {ann.image_id}"))
            continue
        x, y, w, h = ann.bbox
        if w <= 0 or h <= 0:
            out.append(Problem(file, entry, f"box {list(ann.bbox)} has no area (width and "
                                            "height must be positive)"))
        elif (x < -_EDGE or y < -_EDGE or x + w > owner.width + _EDGE
              or y + h > owner.height + _EDGE):
            out.append(Problem(file, entry, f"box {list(ann.bbox)} lies outside its image "
                                            f"{owner.file_name} ({owner.width}x{owner.height})"))
    return out


def check_overlap(split_images: Mapping[str, Mapping[str, str]]) -> list[Problem]:
    """The same image content in two splits (a leak from training into evaluation).

    `split_images` maps split -> {sha256: path}; every pair of splits is compared.
    """
    out: list[Problem] = []
    for a, b in itertools.combinations(sorted(split_images), 2):
        for sha in sorted(split_images[a].keys() & split_images[b].keys()):
            out.append(Problem(
                f"annotations/{a}.json and annotations/{b}.json",
                f"{split_images[a][sha]} and {split_images[b][sha]}",
                f"the same image (sha256 {sha[:12]}…) is in both '{a}' and '{b}'"))
    return out


def check_images(images: Iterable[tuple[str, pathlib.Path]],
                 full: bool = False) -> dict[str, ImageSeen]:
    """Open every image ((COCO file_name, file) pairs) and say what was found."""
    from PIL import Image

    seen: dict[str, ImageSeen] = {}
    for name, path in images:
        try:
            with Image.open(path) as im:
                size = im.size
                if full:
                    im.load()
                else:
                    im.verify()
            seen[name] = ImageSeen(width=size[0], height=size[1])
        except Exception as exc:  # Pillow raises many types for a broken file; all mean broken
            seen[name] = ImageSeen(error=f"{type(exc).__name__}: {exc}")
    return seen
