"""Argo Events' dependency filters, evaluated here the way its Sensor evaluates them.

For the subset the project renders: `data` filters of type `string` (Go RE2 regexes,
*unanchored*), `bool` and `number`, their comparators, `dataLogicalOperator` `and`/`or`
(a missing path fails under `and`), gjson paths (keys, indices, `#`, `@reverse`);
transcribed from argoproj/argo-events v1.9 `pkg/sensors/dependencies/filter.go`
(`filterEvent`, `filterData`). Other filter types are refused, not guessed at. Event data
is `{"header"|"headers": ..., "body": payload}` (`pkg/eventsources/events/event-data.go`).
Why: docs/inside-workflows.md.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping

__all__ = ["MISSING", "dependency_matches", "gjson_get"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


def gjson_get(data: Any, path: str) -> Any:
    """The value at a gjson `path`, or MISSING.

    `a.b`, `a.0`, `a.#` (length), `a.#.b` (every element's `b`, as a list) and
    the `@reverse` modifier: the parts of gjson's syntax our filters use.
    """
    return _get(data, path.split("."))


def _get(current: Any, parts: list[str]) -> Any:
    for i, part in enumerate(parts):
        if part == "@reverse":
            if isinstance(current, list):
                current = list(reversed(current))
            continue
        if isinstance(current, Mapping):
            if part not in current:
                return MISSING
            current = current[part]
        elif isinstance(current, list):
            if part == "#" and i + 1 < len(parts):
                found = [_get(item, parts[i + 1:]) for item in current]
                return [v for v in found if v is not MISSING]
            if part == "#":
                current = len(current)
            elif part.isdigit() and int(part) < len(current):
                current = current[int(part)]
            else:
                return MISSING
        else:
            return MISSING
    return current


def _as_string(value: Any) -> str:
    """gjson's `Result.String()`: JSON text for objects/arrays, '' for null."""

    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _as_bool(value: Any) -> bool:
    """gjson's `Result.Bool()`: true, a non-zero number, or a string that parses as true."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, str):
        return value.lower() in ("1", "t", "true")
    return False


def _as_float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _go_regex(pattern: str) -> re.Pattern[str]:
    """Go RE2 syntax as Python's `re` reads it (the subset our filters use is the same)."""
    return re.compile(pattern)


def _one(flt: Mapping[str, Any], value: Any) -> bool:
    kind = flt.get("type")
    comparator = flt.get("comparator", "=") or "="
    values = [str(v) for v in flt.get("value") or []]
    if kind == "bool":
        return any(_as_bool(value) == (v.lower() == "true") for v in values)
    if kind == "number":
        event = _as_float(value)
        compare = {"=": event.__eq__, "!=": event.__ne__, ">": event.__gt__,
                   ">=": event.__ge__, "<": event.__lt__, "<=": event.__le__}[comparator]
        return any(compare(float(v)) for v in values if not math.isnan(float(v)))
    if kind == "string":
        text = _as_string(value)
        for pattern in values:
            match = _go_regex(pattern).search(text) is not None
            if (comparator in ("=", "") and match) or (comparator == "!=" and not match):
                return True
        return False
    raise ValueError(f"unsupported data filter type {kind!r}")


def dependency_matches(dependency: Mapping[str, Any], event_data: Any) -> bool:
    """Whether an event with `event_data` passes the dependency's filters."""
    filters = dependency.get("filters") or {}
    unsupported = set(filters) - {"data", "dataLogicalOperator"}
    if unsupported:
        raise ValueError(f"filters {sorted(unsupported)} are not evaluated here")
    data = filters.get("data") or []
    operator = filters.get("dataLogicalOperator", "and") or "and"
    if not data:
        return True
    for flt in data:
        value = gjson_get(event_data, flt["path"])
        if value is MISSING or not flt.get("value"):
            if operator == "and":
                return False  # Argo Events: "path does not exist" is an error, no trigger
            continue
        ok = _one(flt, value)
        if operator == "or" and ok:
            return True
        if operator == "and" and not ok:
            return False
    return operator == "and"
