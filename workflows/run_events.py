"""Run events: what a local pipeline run did, as typed records, one JSON line each.

The local runner appends to `OUT/events.jsonl` as the run goes: the run
started, each task started (with its log), each task finished (phase,
seconds, message, outputs), the run finished (status, seconds). Readers (the
demo, tests) follow a run by these records instead of parsing the runner's
narration, which is for people and free to change. A reader may see a line
being written: a torn last line is skipped, never an error.
"""

import dataclasses
import json
import pathlib
import time
from collections.abc import Sequence
from typing import Any, Literal

__all__ = ["EVENTS_FILE", "RunEvent", "append", "current_task", "finished", "read"]

EVENTS_FILE = "events.jsonl"

Kind = Literal["run_started", "task_started", "task_finished", "run_finished"]


@dataclasses.dataclass(frozen=True)
class RunEvent:
    """One thing that happened in a run; fields a kind does not use stay empty."""

    kind: Kind
    at: float  # epoch seconds
    workflow: str = ""
    task: str = ""
    log: str = ""
    phase: str = ""  # task: Succeeded | Failed | Skipped | Omitted; run: its status
    seconds: float = 0.0
    message: str = ""
    outputs: dict[str, str] = dataclasses.field(default_factory=dict)

    def to_json(self) -> str:
        data = {k: v for k, v in dataclasses.asdict(self).items() if v not in ("", 0.0, {})}
        return json.dumps({"kind": self.kind, "at": self.at, **data}, sort_keys=True)


def append(out: pathlib.Path, kind: Kind, **fields: Any) -> RunEvent:
    """Append one event to `out/events.jsonl` (one write of one line, flushed)."""
    event = RunEvent(kind=kind, at=round(time.time(), 3), **fields)
    with open(pathlib.Path(out) / EVENTS_FILE, "a", encoding="utf-8") as fh:
        fh.write(event.to_json() + "\n")
    return event


def read(out: pathlib.Path) -> list[RunEvent]:
    """Every complete event of the run in `out` (none yet: an empty list)."""
    try:
        text = (pathlib.Path(out) / EVENTS_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    names = {f.name for f in dataclasses.fields(RunEvent)}
    events = []
    for line in text.splitlines():
        try:
            data = json.loads(line)
            events.append(RunEvent(**{k: v for k, v in data.items() if k in names}))
        except (ValueError, TypeError):
            continue  # the line being written, or one from a newer runner
    return events


def current_task(events: Sequence[RunEvent]) -> RunEvent | None:
    """The `task_started` event of the task still running, if any."""
    running: dict[str, RunEvent] = {}
    for event in events:
        if event.kind == "task_started":
            running[event.task] = event
        elif event.kind == "task_finished":
            running.pop(event.task, None)
        elif event.kind == "run_started":
            running.clear()  # a re-run into the same OUT starts over
    return list(running.values())[-1] if running else None


def finished(events: Sequence[RunEvent]) -> RunEvent | None:
    """The `run_finished` event of the latest run, if it has finished."""
    for event in reversed(events):
        if event.kind == "run_finished":
            return event
        if event.kind == "run_started":
            return None
    return None
