"""MkDocs hooks (`mkdocs.yml`, `hooks:`): the generated pages of the documentation site.

At each build the reference pages are made from the code of the checkout being built
(`mlops.reference`): the CLI from its argparse parsers, the three configuration files from
their pydantic models, and the benchmarks page from `benchmarks/results/*.json`. They are
never committed, so they cannot drift from the code; `python -m mkdocs build --strict`
(in `scripts/test.sh`, through `tests/test_docs_site.py`) then fails on a broken link or
a page missing from the site. Measured numbers in the pages' prose are filled in from the
same results files (`mlops.reference.numbers`).
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # document this checkout, whatever is installed
    sys.path.insert(0, str(ROOT))


def generated_pages() -> dict[str, str]:
    """{page path under docs/: its Markdown} for every generated page."""
    from mlops.reference import benchmarks, cli, config

    pages = {"reference/cli.md": cli.markdown(), "benchmarks.md": benchmarks.markdown(ROOT)}
    for name, (page, _, _) in config.PAGES.items():
        pages[page] = config.markdown(name)
    return pages


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the site's files."""
    from mkdocs.structure.files import File

    for path, text in generated_pages().items():
        existing = files.get_file_from_path(path)
        if existing is not None:  # a hand-written page of that name would be shadowed
            raise SystemExit(f"docs/{path}: generated at build time; remove the file")
        files.append(File.generated(config, path, content=text))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill in the measured numbers a page cites from `benchmarks/results/`."""
    from mlops.reference.numbers import render

    try:
        return render(markdown, ROOT / "benchmarks/results", f"docs/{page.file.src_path}")
    except ValueError as problem:
        raise SystemExit(str(problem)) from None
