"""The rooms' prose stays what a reader of the code needs (`scripts/prose_check.py`):
module docstrings within the bound, and no issue numbers, dates or machine timings in
comments and docstrings (tests/ and benchmarks/ are not rooms). Why: docs/development.md,
"Prose in the code"."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import pytest

from tests.rooms import ROOMS

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "prose_check.py"

_spec = importlib.util.spec_from_file_location("prose_check", SCRIPT)
assert _spec and _spec.loader
prose = importlib.util.module_from_spec(_spec)
sys.modules["prose_check"] = prose  # dataclasses resolve the module by name
_spec.loader.exec_module(prose)


def test_the_rooms_prose_passes():
    violations = prose.check()
    assert not violations, "\n".join(map(str, violations))


def test_the_check_walks_every_room():
    assert prose.rooms() == ROOMS


@pytest.mark.parametrize(("source", "what"), [
    ('"""A module."""\n# see issue 41, finding 3\n', "issue reference"),
    ('"""A module (issue #12)."""\n', "issue reference"),
    ('"""A module."""\n\n\ndef f():\n    """Fixed as the #3 issue asked."""\n', "issue reference"),
    ('"""A module."""\nX = 1  # measured 2026-11-27\n', "date"),
    ('"""A module."""\n\n\nclass C:\n    """Costs 0.9 CPU-s a rank."""\n', "machine timing"),
    ('"""A module."""\n#: 0.94 of the bare loop on this 2-core machine\nX = 1\n', "machine timing"),
    ('"""A module."""\n# takes 3 s on this machine\n', "machine timing"),
    ('"""' + "line\n" * (prose.MAX_MODULE_DOC_LINES + 1) + '"""\n', "module docstring too long"),
])
def test_each_kind_of_violation_is_found(source, what):
    assert [v.what for v in prose.check_source("m.py", source)] == [what]


@pytest.mark.parametrize("source", [
    '"""A module."""\nHEADERS = {"X-GitHub-Api-Version": "2022-11-28"}  # a value, not prose\n',
    '"""CPUs allowed by a cgroup quota, on a 64-core node."""\n',
    '"""' + "line\n" * (prose.MAX_MODULE_DOC_LINES - 1) + '"""\n',
])
def test_code_and_plain_prose_pass(source):
    assert prose.check_source("m.py", source) == []


def test_the_script_exits_1_on_a_violation(tmp_path):
    (tmp_path / ".importlinter").write_text("[importlinter]\nroot_packages =\n    room\n")
    (tmp_path / "room").mkdir()
    (tmp_path / "room" / "ok.py").write_text('"""Fine."""\n')
    run = [sys.executable, str(SCRIPT), "--root", str(tmp_path)]
    assert subprocess.run(run, capture_output=True).returncode == 0
    (tmp_path / "room" / "bad.py").write_text('"""Fine."""\n# fixed in issue 7\n')
    proc = subprocess.run(run, capture_output=True, text=True)
    assert proc.returncode == 1
    assert "room/bad.py:2: issue reference" in proc.stdout
