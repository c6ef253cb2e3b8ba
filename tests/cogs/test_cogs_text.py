"""`cogs.text`: someone else's text made safe for a terminal or a one-line record."""

from __future__ import annotations

import pytest

from cogs.text import one_line, printable
from gitops.git import line_problem

ATTACKS = {
    "OSC 52 clipboard write": "\x1b]52;c;ZXZpbA==\x07",
    "cursor up and erase": "\x1b[2A\x1b[2K",
    "carriage return": "ok\rFORGED",
    "backspace": "abc\x08\x08x",
    "C1 CSI": "\x9b2J",
    "delete": "a\x7fb",
    "bidi override": "admin\u202egnp.exe",
    "line separator": "a\u2028b",
    "NUL": "a\x00b",
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_no_control_survives_printable_or_one_line(name):
    text = ATTACKS[name]
    for out in (printable(text), one_line(text)):
        assert not any(ord(c) < 0x20 and c not in "\n\t" for c in out), repr(out)
        assert not any(0x7f <= ord(c) < 0xa0 for c in out), repr(out)
        assert "\u202e" not in out and "\u2028" not in out
    assert line_problem(one_line(text)) is None  # a commit trailer git and we accept


def test_escapes_are_visible_and_plain_text_is_untouched():
    assert printable("cat\x1b[2J") == "cat\\x1b[2J"
    assert printable("admin\u202egnp") == "admin\\u202egnp"
    assert printable("line one\n\tline two\r\n") == "line one\n\tline two\n"
    plain = "v2 over v1: error rate 3.1% (limit 1%), C:\\data\\x.json"
    assert printable(plain) is plain and one_line(plain) == plain


def test_one_line_joins_whitespace_runs():
    assert one_line("  a\n\tb\r\nc\x1c d  ") == "a b c d"
