"""YAML in and out of the GitOps repo, one format for every file we write.

Documents are dumped in the builders' key order (``sort_keys=False``) so the
files read like hand-written manifests and diffs stay small; the builders are
deterministic, so the text is too (golden tests pin it). Loading names the file
and the line of the first problem, because a human may have edited the file.
"""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

from gitops.errors import BrokenManifestError

# libyaml's C loader/dumper when present: pure-Python parsing was a large share
# of each controller decision (read, change, write). Same output, same errors.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump(doc: Any) -> str:
    """One document as YAML text."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def parse(text: str, name: str) -> list[Any]:
    """Every document in ``text``; ``name`` (a repo path) goes into error messages."""
    try:
        docs = [doc for doc in yaml.load_all(text, Loader=_Loader) if doc is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BrokenManifestError(
            f"{name}: not valid YAML{where}: {problem}; fix or revert this file", path=name
        ) from None
    return docs


def load_one(path: pathlib.Path, name: str) -> Any:
    """The single document of a file (``None`` if empty); more than one is an error."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise BrokenManifestError(f"{name}: not UTF-8 text", path=name) from None
    return one(text, name)


def one(text: str, name: str) -> Any:
    """The single document of ``text`` (``None`` if empty); more than one is an error."""
    docs = parse(text, name)
    if len(docs) > 1:
        raise BrokenManifestError(
            f"{name}: holds {len(docs)} YAML documents, expected one", path=name
        )
    return docs[0] if docs else None
