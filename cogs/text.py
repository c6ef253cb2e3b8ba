"""Text someone else wrote, made safe for a terminal line or a one-line record.

A pusher writes class names, dataset names, PR bodies and reasons that later reach
a reviewer's terminal (`mlops pr show`, `mlops data diff`) or a commit trailer the
controller writes. Raw, an ESC starts a terminal escape sequence (a cursor move that
rewrites the lines above, an OSC 52 clipboard write), a CR
overwrites the line it is on, and a control character in a commit trailer makes git
refuse the commit every tick. The characters are not removed but shown
escaped (`\\x1b`, `\\u202e`), so a reader sees that something was there.

Escaped: every Unicode control character (category Cc: C0, DEL, C1), the line and
paragraph separators (Zl, Zp) and the bidirectional overrides and isolates (Cf
U+202A..U+202E, U+2066..U+2069: "Trojan Source" text that displays in another order
than it reads). A backslash stays as it is: text that merely looks like an escape is
harmless, and doubling every backslash would garble paths and patterns in reasons.

Pure; no I/O. Two entries, one rule:

* :func:`printable` -- for a terminal: keeps line breaks and tabs (a PR body has
  lines) and escapes the rest;
* :func:`one_line` -- for a commit subject or trailer and any one-line record:
  whitespace runs (LF, CR, tab, FS..US, NEL, ...) become one space, the rest is
  escaped as by `printable`.
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
