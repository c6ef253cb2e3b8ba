"""A child started in a session of its own keeps its parent's priority (cogs/priority.py).

Real kernel behaviour, no mock: a helper process leaves for a session of its own, lowers
its autogroup's nice (no privilege needed), starts a `sleep` with `start_new_session=True`
and reports the child's autogroup. Linux's autogroups are described in sched(7), "The
autogroup feature"; the kernel writes /proc/<pid>/autogroup as "/autogroup-<id> nice <n>".
"""

import pathlib
import subprocess
import sys

import pytest

from cogs.priority import autogroup_nice

pytestmark = pytest.mark.skipif(
    autogroup_nice() is None or pathlib.Path("/proc/sys/kernel/sched_autogroup_enabled")
    .read_text().strip() != "1", reason="this kernel schedules without autogroups")

CHILD = """
import os, pathlib, subprocess, sys
from cogs.priority import autogroup_nice, keep_priority
os.setsid()
pathlib.Path("/proc/self/autogroup").write_text("3")
child = subprocess.Popen(["sleep", "30"], start_new_session=True)
try:
    if sys.argv[1] == "keep":
        keep_priority(child.pid)
    print(autogroup_nice(), autogroup_nice(child.pid))
finally:
    child.kill()
    child.wait()
"""


def _nices(mode):
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True,
                         check=True, cwd=pathlib.Path(__file__).resolve().parents[2])
    return [int(x) for x in out.stdout.split()]


def test_a_new_session_starts_at_nice_0_whatever_its_parents_autogroup():
    assert _nices("plain") == [3, 0]


def test_keep_priority_gives_the_child_its_parents_autogroup_nice():
    assert _nices("keep") == [3, 3]
