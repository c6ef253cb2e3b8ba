"""PaddleDetection's VOC datasets: its list file, label list and XML files, read as COCO.

A `VOCDataSet` (PaddleDetection's `ppdet/data/source/voc.py`) names a list file whose
lines are `image xml` (paths under `dataset_dir/image_dir`), a `label_list` file with one
class name a line (absent: the 20 Pascal VOC classes, `pascalvoc_label` there), and one
XML file an image with its `size` and `object`s (`name`, `bndbox` with `xmin`, `ymin`,
`xmax`, `ymax`). Training here reads COCO, so prepare writes each VOC split as a COCO
annotation file the way PaddleDetection's own converter does (`tools/x2coco.py`,
`voc_xmls_to_cocojson`): category ids 1..N in the label list's order, a box
`[xmin, ymin, xmax - xmin, ymax - ymin]`, images numbered in the list's order, with the
XML's size. Everything is parsed from bytes the pins verified; an unreadable file is a
DataError naming it. (ElementTree on CPython 3.11's expat refuses entity expansion
bombs and never fetches external entities.)
"""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from typing import Sequence

import orjson

from datapins.errors import DataError
from datapins.validate import Problem

__all__ = ["VOC_CLASSES", "VocImage", "parse_labels", "parse_list", "parse_xml", "to_coco"]

#: PaddleDetection's default VOC label map (`pascalvoc_label`), in its order.
VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair",
               "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant",
               "sheep", "sofa", "train", "tvmonitor")


@dataclasses.dataclass(frozen=True)
class VocObject:
    """One box of an XML file, in VOC's corner coordinates."""

    name: str
    box: tuple[float, float, float, float]  # xmin, ymin, xmax, ymax


@dataclasses.dataclass(frozen=True)
class VocImage:
    """One XML file: the image's declared size and its boxes."""

    width: float
    height: float
    objects: tuple[VocObject, ...]


def parse_list(data: bytes, name: str) -> list[tuple[str, str]]:
    """The (image, xml) pairs of a list file, paths as written; DataError on a bad line."""
    pairs = []
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 2:
            raise DataError(f"{name}: line {number}: expected `image xml`, got {line.strip()!r}")
        pairs.append((fields[0], fields[1]))
    if not pairs:
        raise DataError(f"{name}: no `image xml` lines")
    return pairs


def parse_labels(data: bytes | None) -> list[str]:
    """The class names of a label list (one a line); None: PaddleDetection's VOC classes."""
    if data is None:
        return list(VOC_CLASSES)
    return [line.strip() for line in data.decode("utf-8", "replace").splitlines()
            if line.strip()]


def parse_xml(data: bytes, name: str) -> VocImage:
    """One VOC XML file; DataError naming the file and the element on anything unreadable."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise DataError(f"{name}: not valid XML ({exc})") from None

    def number(node: ET.Element | None, tag: str, where: str) -> float:
        text = node.findtext(tag) if node is not None else None
        try:
            return float(text)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise DataError(f"{name}: {where}: <{tag}> is {text!r}, not a number") from None

    size = root.find("size")
    width, height = number(size, "width", "size"), number(size, "height", "size")
    objects = []
    for i, obj in enumerate(root.findall("object")):
        label = (obj.findtext("name") or "").strip()
        if not label:
            raise DataError(f"{name}: object {i}: no <name>")
        box = obj.find("bndbox")
        where = f"object {i} ({label}).bndbox"
        objects.append(VocObject(label, (number(box, "xmin", where), number(box, "ymin", where),
                                         number(box, "xmax", where), number(box, "ymax", where))))
    return VocImage(width, height, tuple(objects))


def to_coco(images: Sequence[tuple[str, str, VocImage]],
            labels: Sequence[str]) -> tuple[bytes, list[Problem]]:
    """(COCO annotation JSON, problems) of (file_name, xml path, parsed XML) entries.

    A box whose class is not in `labels` is a problem naming its XML file (PaddleDetection
    would stop on it with a KeyError); it is left out of the JSON.
    """
    ids = {label: i + 1 for i, label in enumerate(labels)}
    out_images: list[dict[str, object]] = []
    annotations: list[dict[str, object]] = []
    problems: list[Problem] = []
    for image_id, (file_name, xml_path, voc) in enumerate(images, 1):
        out_images.append({"id": image_id, "file_name": file_name,
                           "width": int(round(voc.width)), "height": int(round(voc.height))})
        for i, obj in enumerate(voc.objects):
            if obj.name not in ids:
                problems.append(Problem(xml_path, f"object {i}",
                                        f"class {obj.name!r} is not in the label list "
                                        f"({', '.join(labels)})"))
                continue
            xmin, ymin, xmax, ymax = obj.box
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": ids[obj.name],
                                "bbox": [xmin, ymin, xmax - xmin, ymax - ymin],
                                "area": (xmax - xmin) * (ymax - ymin), "iscrowd": 0})
    categories = [{"id": i, "name": label, "supercategory": "none"} for label, i in ids.items()]
    coco = {"images": out_images, "annotations": annotations, "categories": categories}
    return orjson.dumps(coco), problems
