"""Measured numbers in the docs' prose are filled in from `benchmarks/results/` at build time.

`mlops.reference.numbers.render` is what the site's hook (`scripts/docs_hooks.py`,
`on_page_markdown`) runs on every page; a placeholder that leads nowhere must stop the
build with the page and the placeholder named, never print a stale or empty number.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from mlops.reference.numbers import render

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture()
def results(tmp_path):
    (tmp_path / "bench.json").write_text(json.dumps({
        "detect": {"swap": {"rolled_back": 150, "p90": 1309.0, "rate": 0.003125,
                            "rows": [{"n": 7}]}},
        "note": "text"}))
    return tmp_path


def test_placeholders_become_the_numbers_of_the_results_file(results):
    text = ("{{ bench detect.swap.rolled_back }} of 150, after {{ bench detect.swap.p90 }} "
            "requests ({{ bench detect.swap.rate | .1% }}; {{bench detect.swap.rows.0.n}})")
    assert render(text, results) == "150 of 150, after 1,309 requests (0.3 %; 7)"


def test_code_keeps_its_placeholders_as_written(results):
    text = "`{{ bench detect.swap.p90 }}` and\n```\n{{ bench detect.swap.p90 }}\n```\n"
    assert render(text, results) == text


@pytest.mark.parametrize("placeholder, complaint", [
    ("{{ bench detect.nothing.rolled_back }}", "no 'nothing'"),
    ("{{ missing detect.swap.p90 }}", "no results file"),
    ("{{ bench detect.swap }}", "not a number but a dict"),
    ("{{ bench note | .1% }}", "format '.1%'"),
])
def test_a_placeholder_that_leads_nowhere_names_the_page_and_itself(results, placeholder,
                                                                      complaint):
    with pytest.raises(ValueError) as problem:
        render(f"before {placeholder} after", results, "docs/canary.md")
    assert str(problem.value).startswith(f"docs/canary.md: {placeholder}")
    assert complaint in str(problem.value)


def test_every_placeholder_of_the_docs_resolves_against_the_committed_results():
    """The committed pages against the committed results (what the strict build renders),
    without building the site."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    rendered = [page for page in pages if render(page.read_text(), ROOT / "benchmarks/results",
                                                 str(page.relative_to(ROOT))) != page.read_text()]
    assert {"canary.md", "gate.md"} <= {page.name for page in rendered}
