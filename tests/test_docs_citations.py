"""The code's citations of its design notes and principles point at sections that exist
in this repository (issue 12: docstrings cited `STYLE n` and `DESIGN §4`, files that were
not in the repo)."""

from __future__ import annotations

import pathlib
import re

from tests.rooms import ROOMS

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _sections(doc: str, pattern: str) -> set[str]:
    return set(re.findall(pattern, (ROOT / "docs" / doc).read_text(), re.M))


def test_every_citation_names_an_existing_section():
    principles = _sections("principles.md", r"^(\d+)\. \*\*")
    design = _sections("design.md", r"^## §(\d+)\.")
    cited = []
    for room in ROOMS:
        for path in (ROOT / room).rglob("*.py"):
            text = path.read_text()
            assert not re.search(r"\bSTYLE\b|\bDESIGN\b", text), f"{path}: cites an outside file"
            cited += [(path, "principles", n) for n in re.findall(r"principles §(\d+)", text)]
            cited += [(path, "design", n) for n in re.findall(r"design(?:\.md)?\s+§(\d+)", text)]
    assert len(cited) >= 10  # the citations are there to be checked
    for path, doc, number in cited:
        assert number in (principles if doc == "principles" else design), \
            f"{path.relative_to(ROOT)} cites {doc} §{number}, which docs/{doc}.md lacks"
