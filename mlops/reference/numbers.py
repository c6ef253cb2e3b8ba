"""Numbers in the docs' prose, read from `benchmarks/results/*.json` when the site is built.

A page writes `{{ canary_guarantees detect.score_shift.rolled_back }}` (a results file's
name without `.json`, then a dotted path into it, optionally `| FORMAT` in Python's
format-spec language, e.g. `| .1%`) where a measured number belongs; the build puts the
number there, so prose and results cannot disagree; code (fenced or inline) is left as
written. A path that leads nowhere fails the build naming the page, the placeholder and
the file.
"""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any

__all__ = ["PLACEHOLDER", "render"]

PLACEHOLDER = re.compile(
    r"\{\{\s*(?P<file>[A-Za-z0-9_]+)\s+(?P<path>[A-Za-z0-9_.\-]+)\s*(?:\|\s*(?P<spec>[^}]*?)\s*)?\}\}")


_CODE = re.compile(r"(```.*?```|`[^`\n]*`)", re.S)


def _lookup(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            raise KeyError(part)
    return data


def _plain(value: Any) -> str:
    """A number as prose writes it: thousands separated, at most three significant
    decimals, an integral float without its `.0`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def render(markdown: str, results: pathlib.Path, page: str = "page") -> str:
    """`markdown` with every placeholder replaced by its number from `results/<file>.json`
    (each file read once per call: `mkdocs serve` shows a re-run benchmark's numbers)."""
    loaded: dict[pathlib.Path, Any] = {}

    def number(match: re.Match[str]) -> str:
        source = results / f"{match['file']}.json"
        where = f"{page}: {match[0]}"
        if not source.is_file():
            raise ValueError(f"{where}: no results file {source}")
        try:
            if source not in loaded:
                loaded[source] = json.loads(source.read_text())
            value = _lookup(loaded[source], match["path"])
        except KeyError as missing:
            raise ValueError(f"{where}: {source.name} has no {missing} on that path") from None
        if isinstance(value, (dict, list)):
            raise ValueError(f"{where}: {match['path']} is not a number but a "
                             f"{type(value).__name__}")
        try:
            if not match["spec"]:
                return _plain(value)
            text = format(value, match["spec"])
            # the docs write a space before the percent sign, as SI does
            return text[:-1] + " %" if match["spec"].endswith("%") else text
        except (TypeError, ValueError) as bad:
            raise ValueError(f"{where}: format {match['spec']!r}: {bad}") from None

    parts = _CODE.split(markdown)  # odd parts are code
    return "".join(part if i % 2 else PLACEHOLDER.sub(number, part)
                   for i, part in enumerate(parts))
