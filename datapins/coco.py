"""The COCO annotation schema, as much of it as training and evaluation read.

Parsed once, at the boundary, into typed objects; a malformed file is a DataError
naming the file and the entry (`annotations[3] (id 17).bbox`), never a KeyError later.
Fields beyond these (segmentation, area, licenses, info) are ignored, not checked.

The entries are slotted dataclasses validated by pydantic straight from the JSON
bytes (`TypeAdapter.validate_json`): for a 10k-image split that is 7 MB held and
7 MB at the peak, where `BaseModel`s built from an `orjson` dict held 20 MB and
peaked at 48 MB, which at 100k images was most of prepare's memory.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import orjson
import pydantic

from datapins.errors import DataError

__all__ = ["CocoAnnotation", "CocoCategory", "CocoFile", "CocoImage", "parse_coco"]

_Positive = Annotated[int, pydantic.Field(gt=0)]
_Name = Annotated[str, pydantic.Field(min_length=1)]


@dataclasses.dataclass(frozen=True, slots=True)
class CocoImage:
    """An image entry: its id, file (relative to `images/`) and declared size."""

    id: int
    file_name: _Name
    width: _Positive
    height: _Positive


@dataclasses.dataclass(frozen=True, slots=True)
class CocoAnnotation:
    """A box: `bbox` is [x, y, width, height] in pixels, COCO's convention."""

    id: int
    image_id: int
    category_id: int
    bbox: tuple[float, float, float, float]


@dataclasses.dataclass(frozen=True, slots=True)
class CocoCategory:
    """A class: its id and the name the model's label list uses."""

    id: int
    name: _Name


@dataclasses.dataclass(frozen=True, slots=True)
class CocoFile:
    """One split's annotation file."""

    images: list[CocoImage]
    annotations: list[CocoAnnotation]
    categories: list[CocoCategory]


_ADAPTER = pydantic.TypeAdapter(CocoFile)


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
        return _ADAPTER.validate_json(data)
    except pydantic.ValidationError as exc:
        errors = exc.errors()
    # The failure path only: parse again to name the failing entry by its id.
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DataError(f"{name}: not JSON ({exc})") from None
    first = errors[0]
    raise DataError(f"{name}: {_where(raw, first['loc'])}: {first['msg']} "
                    f"({len(errors)} problem(s) in this file)") from None
