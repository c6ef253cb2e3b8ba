"""A child started in a session of its own keeps its parent's CPU priority.

With `kernel.sched_autogroup_enabled` (the default on desktop and many server
kernels), Linux shares the CPU between autogroups, one per session, and a
process's nice only weighs against the processes of its own session. A child
started with `start_new_session=True` (every server, run and worker we start,
so a process-group kill reaches all it started) gets a fresh autogroup at nice 0,
whatever the priority of what started it: `nice mlops up`, or a test worker
that lowered its own, would still start its servers at a normal priority.
`keep_priority(pid)` gives the child's autogroup the caller's autogroup nice.
"""

from __future__ import annotations

import pathlib


def autogroup_nice(pid: int | str = "self") -> int | None:
    """The nice of `pid`'s autogroup (``/autogroup-123 nice 5``); None without autogroups."""
    try:
        text = pathlib.Path(f"/proc/{pid}/autogroup").read_text()
        return int(text.rsplit("nice", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


def keep_priority(pid: int) -> None:
    """Give `pid`'s autogroup (its session's) the caller's autogroup nice, when the caller's
    is not the default. Best effort: a child already gone, or a kernel without autogroups,
    leaves things as they are (a lower priority never needs privileges; a higher one does)."""
    nice = autogroup_nice()
    if not nice:
        return
    try:
        pathlib.Path(f"/proc/{pid}/autogroup").write_text(str(nice))
    except OSError:
        pass
