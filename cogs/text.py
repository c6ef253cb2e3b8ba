"""Text someone else wrote, made safe for a terminal line or a one-line record.

Control characters, line and paragraph separators and bidirectional overrides are shown
escaped (`\\x1b`, `\\u202e`), not removed; a backslash stays as it is. Pure; no I/O.

* :func:`printable` -- for a terminal: keeps line breaks and tabs, escapes the rest;
* :func:`one_line` -- for a commit subject or trailer and any one-line record:
  whitespace runs become one space, the rest is escaped as by `printable`.

Why: docs/inside-foundations.md.
"""

from __future__ import annotations

import unicodedata

__all__ = ["one_line", "printable"]

_BIDI = frozenset(range(0x202A, 0x202F)) | frozenset(range(0x2066, 0x206A))
_KEPT_IN_LINES = frozenset("\n\t")


def _unsafe(char: str) -> bool:
    return unicodedata.category(char) in ("Cc", "Zl", "Zp") or ord(char) in _BIDI


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, lines: bool = True) -> str:
    """`text` with every terminal control escaped (line breaks and tabs kept if `lines`)."""
    keep = _KEPT_IN_LINES if lines else frozenset()
    if lines:
        text = text.replace("\r\n", "\n")  # a forge's CRLF body is lines, not controls
    if not any(_unsafe(c) and c not in keep for c in text):
        return text  # the common case: nothing to do, no copy
    return "".join(c if c in keep or not _unsafe(c) else _escape(c) for c in text)


def one_line(text: str) -> str:
    """`text` as one line of printable text: whitespace runs become one space, controls
    are escaped (a commit trailer or subject built from free text goes through this)."""
    return printable(" ".join(str(text).split()), lines=False)
