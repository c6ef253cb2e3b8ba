"""The prose of the rooms' code: measured, and kept to what a reader of the code needs.

`python3 scripts/prose_check.py [--root DIR]` prints the module docstrings' size (words, median and
longest lines) and every violation, and exits 1 if there is one:

- a module docstring longer than `MAX_MODULE_DOC_LINES` lines (what the module is for
  belongs there; why, the rejected alternatives and the measurements belong in `docs/`);
- in a comment or a docstring: a reference to an issue ("issue 41", "#3 issue"), a date
  (2026-11-27), or a timing tied to one machine ("CPU-s", "2-core machine",
  "3 s on this machine"). The fact goes to a commit body, `docs/`, or
  `benchmarks/results/*.json` through a script in `benchmarks/`.

`tests/test_prose.py` runs the same check. Why: docs/development.md, "Prose in the code".
"""

from __future__ import annotations

import ast
import configparser
import dataclasses
import io
import pathlib
import re
import statistics
import sys
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: The longest module docstring allowed, in lines (the anchors' are 1 to 15).
MAX_MODULE_DOC_LINES = 15

#: (name, pattern) of what a comment or docstring must not carry.
FORBIDDEN: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("issue reference", re.compile(r"\bissues?\s+#?\d+|#\d+\s+issue\b", re.I)),
    ("date", re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")),
    ("machine timing", re.compile(
        r"\bCPU-s\b|\bCPU[- ]seconds?\b"
        r"|\b\d+-core (?:machine|host|box)s?\b"
        r"|\b\d+(?:\.\d+)?\s*(?:ms|s|seconds?|minutes?)\b[^.\n]{0,40}\bon this machine\b",
        re.I)),
)


@dataclasses.dataclass(frozen=True)
class Violation:
    path: str
    line: int
    what: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}: {self.text.strip()[:100]}"


def rooms(root: pathlib.Path = ROOT) -> tuple[str, ...]:
    """The rooms, from `.importlinter`'s `root_packages` (as `tests/rooms.py` reads them)."""
    config = configparser.ConfigParser()
    config.read_string((root / ".importlinter").read_text())
    return tuple(config["importlinter"]["root_packages"].split())


def modules(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """Every Python file of the rooms, in a stable order."""
    return sorted(p for room in rooms(root) for p in (root / room).rglob("*.py")
                  if "__pycache__" not in p.parts)


def module_doc_lines(source: str) -> tuple[int, int]:
    """(lines, words) of a module's docstring; (0, 0) without one."""
    doc = ast.get_docstring(ast.parse(source), clean=False)
    if not doc:
        return 0, 0
    return len(doc.strip().splitlines()), len(doc.split())


def _prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and every docstring-like string statement."""
    found: list[tuple[int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            for offset, line in enumerate(node.value.value.splitlines()):
                found.append((node.lineno + offset, line))
    return found


def check_source(path: str, source: str) -> list[Violation]:
    """The violations in one module's source."""
    violations = []
    lines, _ = module_doc_lines(source)
    if lines > MAX_MODULE_DOC_LINES:
        violations.append(Violation(path, 1, "module docstring too long",
                                    f"{lines} lines (at most {MAX_MODULE_DOC_LINES})"))
    for line, text in _prose(source):
        for what, pattern in FORBIDDEN:
            if pattern.search(text):
                violations.append(Violation(path, line, what, text))
    return sorted(violations, key=lambda v: v.line)


def check(root: pathlib.Path = ROOT) -> list[Violation]:
    """The violations of every room's module."""
    found = []
    for path in modules(root):
        found += check_source(path.relative_to(root).as_posix(), path.read_text())
    return found


def measure(root: pathlib.Path = ROOT) -> dict[str, float]:
    """The module docstrings' size over the rooms."""
    sizes = [module_doc_lines(path.read_text()) for path in modules(root)]
    documented = [lines for lines, _ in sizes if lines]
    return {"modules": len(sizes), "documented": len(documented),
            "words": sum(words for _, words in sizes),
            "median_lines": statistics.median(documented), "max_lines": max(documented)}


def main(argv: list[str] | None = None) -> int:
    """Print the measures and the violations of the checkout at `--root` (default: this one)."""
    args = argv if argv is not None else sys.argv[1:]
    root = pathlib.Path(args[args.index("--root") + 1]) if "--root" in args else ROOT
    print(" ".join(f"{key}={value}" for key, value in measure(root).items()))
    violations = check(root)
    for violation in violations:
        print(violation)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
