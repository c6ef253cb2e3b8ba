"""The reference pages and JSON Schemas, generated from the code itself.

The documentation site (`mkdocs.yml`, hooks in `scripts/docs_hooks.py`) renders its
reference pages at build time from these functions, so a flag, a field or a result
cannot be missing from them: the CLI from the argparse parsers (`cli`), the three
configuration files from their pydantic models (`config`, `schemas`), the exit codes
from `contracts.errors.ExitCode`, the benchmarks from `benchmarks/results/*.json`
(`benchmarks`). The JSON Schemas are also shipped in the package (`mlops/schemas/`),
for editors and for `mlops schema`.
"""

__all__ = [
    "benchmarks",  # the benchmarks page
    "cli",         # the CLI reference page and the exit-code table
    "config",      # the configuration reference pages
    "numbers",     # measured numbers filled into the pages' prose
]
