"""The benchmarks page, generated from `benchmarks/results/*.json` and the scripts' docstrings.

Numbers live in the results files, written by the scripts that measured them
(`benchmarks/*.py`); prose elsewhere says what a benchmark shows and links here, so a
number is written down once, by the run that measured it. Each results file becomes a
section: the script that made it (the longest script name its file name starts with),
the script's docstring (how it measures), then the file itself as tables (scalars as
rows with dotted keys, each list of records as a table of its own).
"""

from __future__ import annotations

import ast
import json
import pathlib
from typing import Any

__all__ = ["markdown", "script_for"]

_LONG = 160  # a cell's compact JSON is cut here


def script_for(result: pathlib.Path, scripts: list[pathlib.Path]) -> pathlib.Path | None:
    """The benchmark script that writes `result` (`fleet_before.json` -> `fleet.py`)."""
    matches = [s for s in scripts if result.stem == s.stem or result.stem.startswith(s.stem + "_")]
    return max(matches, key=lambda s: len(s.stem)) if matches else None


def _text(value: Any) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
        text = ", ".join(_text(v) for v in value) if value else "(none)"
    else:
        text = json.dumps(value, ensure_ascii=False)
    if len(text) > _LONG:
        text = text[: _LONG - 1] + "…"
    from mlops.reference.cli import _cell

    return _cell(text) if text else "`\"\"`"


def _flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys; lists and scalars as values."""
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _records(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _tables(data: dict[str, Any]) -> list[str]:
    flat = _flatten(data)
    scalars = {k: v for k, v in flat.items() if not _records(v)}
    out: list[str] = []
    if scalars:
        out += ["| key | value |", "|---|---|"]
        out += [f"| `{k}` | {_text(v)} |" for k, v in scalars.items()]
        out.append("")
    for key, value in flat.items():
        if not _records(value):
            continue
        rows = [_flatten(v) for v in value]
        columns = list(dict.fromkeys(c for row in rows for c in row))
        out += [f"`{key}`:", "", "| " + " | ".join(f"`{c}`" for c in columns) + " |",
                "|" + "---|" * len(columns)]
        out += ["| " + " | ".join(_text(row[c]) if c in row else "" for c in columns) + " |"
                for row in rows]
        out.append("")
    return out


def markdown(root: pathlib.Path) -> str:
    """The benchmarks page for the checkout at `root`."""
    results = sorted((root / "benchmarks" / "results").glob("*.json"))
    scripts = sorted(p for p in (root / "benchmarks").glob("*.py") if not p.name.startswith("_"))
    out = ["# Benchmarks", "",
           "Every number here was measured by a script in `benchmarks/` and saved in "
           "`benchmarks/results/`; this page is generated from those files at each docs "
           "build, so it shows what the last run of each script wrote. The scripts are "
           "not tests: they print and save ratios and rates measured in one run, on the "
           "machine named in each file (where it says). Compare numbers within one file.", "",
           "| results file | made by | what it measures |", "|---|---|---|"]
    docs: dict[pathlib.Path, str] = {}
    for path in scripts:
        docs[path] = ast.get_docstring(ast.parse(path.read_text())) or ""
    sections: list[str] = []
    for result in results:
        script = script_for(result, scripts)
        doc = docs.get(script, "") if script else ""
        lede = doc.split("\n\n")[0].replace("\n", " ")
        made_by = f"`python benchmarks/{script.name}`" if script else "?"
        out.append(f"| [`{result.name}`](#{result.stem.replace('_', '-')}) | {made_by} | "
                   f"{_text(lede)} |")
        data = json.loads(result.read_text())
        sections += [f"## `{result.name}` {{#{result.stem.replace('_', '-')}}}", "",
                     f"Made by {made_by}.", ""]
        if doc:
            rest = doc.split("\n\n", 1)
            sections += [f"**{rest[0].strip()}**", ""]
            if len(rest) > 1:
                sections += [rest[1].strip(), ""]
        sections += _tables(data if isinstance(data, dict) else {"results": data})
    return "\n".join(out + [""] + sections)
