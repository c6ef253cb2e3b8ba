"""What the source says about each field of a pydantic model, for the reference pages.

The models document their fields three ways, all kept: `Field(description=...)`, an
attribute docstring (a string right after the field), and `#` comments (the block right
above the field, or at the end of its line). Reading the source (`ast`, `tokenize`)
rather than asking every model to repeat its comments as descriptions keeps one home
for each sentence; a field with none of them gets an empty description, not an error.
"""

from __future__ import annotations

import ast
import inspect
import io
import textwrap
import tokenize
from typing import Any

__all__ = ["field_docs", "model_doc"]


def _clean(lines: list[str]) -> str:
    return " ".join(line.strip() for line in lines if line.strip())


def _class_docs(cls: type) -> dict[str, str]:
    """{field: text} from one class's own source (not its bases)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    comments: dict[int, tuple[str, bool]] = {}  # line -> (text, the line holds only it)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            alone = not lines[tok.start[0] - 1][: tok.start[1]].strip()
            comments[tok.start[0]] = (tok.string.lstrip("#").strip(), alone)
    classdef = ast.parse(source).body[0]
    if not isinstance(classdef, ast.ClassDef):
        return {}
    docs: dict[str, str] = {}
    body = classdef.body
    for i, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        parts: list[str] = []
        above: list[str] = []
        line = node.lineno - 1
        while line in comments and comments[line][1]:
            above.insert(0, comments[line][0])
            line -= 1
        parts += above
        end = node.end_lineno or node.lineno
        if end in comments and not comments[end][1]:
            parts.append(comments[end][0])
        after = body[i + 1] if i + 1 < len(body) else None
        if (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            parts.append(inspect.cleandoc(after.value.value))
        text = _clean(" ".join(parts).splitlines())
        if text:
            docs[node.target.id] = text
    return docs


def field_docs(model: type) -> dict[str, str]:
    """{field: description} for every field of a pydantic model that has one."""
    out: dict[str, str] = {}
    for cls in reversed(model.__mro__):  # a subclass's words win over its base's
        if cls.__module__.startswith(("pydantic", "builtins")):
            continue
        out.update(_class_docs(cls))
    fields: dict[str, Any] = getattr(model, "model_fields", {})
    for name, info in fields.items():
        if getattr(info, "description", None):
            out[name] = info.description
    return {name: out[name] for name in fields if name in out}


def model_doc(model: type) -> str:
    """The model's own docstring, cleaned ('' when it has none of its own)."""
    doc = model.__dict__.get("__doc__")
    return inspect.cleandoc(doc) if doc else ""
