"""The COCO annotation schema, as much of it as training and evaluation read.

Parsed once, at the boundary, into typed objects; a malformed file is a DataError
naming the file and the entry (`annotations[3] (id 17).bbox`), never a KeyError later.
Fields beyond these (segmentation, area, licenses, info) are kept out of the way:
allowed, not checked.
"""

from __future__ import annotations

from typing import Any

import orjson
import pydantic

from datapins.errors import DataError

__all__ = ["CocoAnnotation", "CocoCategory", "CocoFile", "CocoImage", "parse_coco"]

_ENTRY = pydantic.ConfigDict(frozen=True, extra="ignore")


class CocoImage(pydantic.BaseModel):
    """An image entry: its id, file (relative to `images/`) and declared size."""

    model_config = _ENTRY
    id: int
    file_name: str = pydantic.Field(min_length=1)
    width: int = pydantic.Field(gt=0)
    height: int = pydantic.Field(gt=0)


class CocoAnnotation(pydantic.BaseModel):
    """A box: `bbox` is [x, y, width, height] in pixels, COCO's convention."""

    model_config = _ENTRY
    id: int
    image_id: int
    category_id: int
    bbox: tuple[float, float, float, float]


class CocoCategory(pydantic.BaseModel):
    """A class: its id and the name the model's label list uses."""

    model_config = _ENTRY
    id: int
    name: str = pydantic.Field(min_length=1)


class CocoFile(pydantic.BaseModel):
    """One split's annotation file."""

    model_config = pydantic.ConfigDict(frozen=True, extra="ignore")
    images: list[CocoImage]
    annotations: list[CocoAnnotation]
    categories: list[CocoCategory]


def _where(raw: Any, loc: tuple[int | str, ...]) -> str:
    """`annotations[3] (id 17).bbox` from pydantic's location, with the entry's own id."""
    if len(loc) >= 2 and isinstance(loc[1], int):
        entry = f"{loc[0]}[{loc[1]}]"
        try:
            entry += f" (id {raw[loc[0]][loc[1]]['id']})"
        except (KeyError, IndexError, TypeError):
            pass
        rest = ".".join(str(p) for p in loc[2:])
        return entry + (f".{rest}" if rest else "")
    return ".".join(str(p) for p in loc) or "(top level)"


def parse_coco(data: bytes, name: str) -> CocoFile:
    """Parse one COCO annotation file; `name` is how errors refer to it."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DataError(f"{name}: not JSON ({exc})") from None
    try:
        return CocoFile.model_validate(raw)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        raise DataError(f"{name}: {_where(raw, first['loc'])}: {first['msg']} "
                        f"({exc.error_count()} problem(s) in this file)") from None
