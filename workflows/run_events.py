"""Run events: what a local pipeline run did, as typed records, one JSON line each.

The local runner appends to `OUT/events.jsonl` as the run goes: the run
started, each task started (with its log), each task finished (phase,
seconds, message, outputs), the run finished (status, seconds). Readers (the
demo, tests) follow a run by these records instead of parsing the runner's
narration, which is for people and free to change. A reader may see a line
being written: a torn last line is skipped, never an error. `scan` and
`summarize` turn a run's records into how it stands (`mlops status --runs`).
"""

import dataclasses
import json
import os
import pathlib
import time
from collections.abc import Sequence
from typing import Any, Literal

__all__ = ["EVENTS_FILE", "RunEvent", "RunSummary", "append", "current_task", "finished", "read",
           "scan", "summarize"]

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


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """One run as `mlops status --runs` shows it, from its events and run.json."""

    name: str  # the pushed commit (a hook's run) or the run directory's name
    out: str
    status: str  # Running | Succeeded | Failed | Error | Died | Queued
    started_at: float | None = None
    seconds: float | None = None
    task: str = ""  # the task running now, or the failing one
    message: str = ""
    version: str = ""
    gate: str = ""  # passed | review (inconclusive, proposed for a person) | refused | ""


def gate_word(outputs: dict[str, str]) -> str:
    """The gate step's outputs in one word: passed, review, refused, or "" (no gate ran)."""
    if outputs.get("outcome") == "review":
        return "review"
    return {"true": "passed", "false": "refused"}.get(outputs.get("passed", ""), "")


def summarize(name: str, out: pathlib.Path, events: Sequence[RunEvent],
              record: dict[str, Any] | None, alive: bool | None, now: float) -> RunSummary:
    """How one run stands, from what it wrote (pure: the caller reads the files).

    `alive` says whether the run's process still exists (None: unknown, e.g.
    a run started by hand). A run with no `run_finished` whose process is gone
    died (killed, machine restarted): shown as such, not as running forever.
    """
    started = next((e for e in reversed(events) if e.kind == "run_started"), None)
    end = finished(events)
    outputs: dict[str, str] = {}
    for event in events:
        if event.kind == "task_finished":
            outputs.update(event.outputs)
    record = record or {}
    outputs.update({k: str(v) for k, v in (record.get("outputs") or {}).items()})
    gate = gate_word(outputs)
    version = outputs.get("version", "")
    if end is not None:
        failed = end.message.split(":", 1)
        return RunSummary(name, str(out), end.phase or "Error", started.at if started else None,
                          end.seconds, task=failed[0] if end.message else "",
                          message=failed[1].strip() if len(failed) > 1 else end.message,
                          version=version, gate=gate)
    if started is None:
        return RunSummary(name, str(out), "Queued" if alive is not False else "Died",
                          version=version, gate=gate)
    running = current_task(events)
    status = "Died" if alive is False else "Running"
    return RunSummary(name, str(out), status, started.at, round(now - started.at, 1),
                      task=running.task if running else "", version=version, gate=gate)


def _alive(pid_file: pathlib.Path) -> bool | None:
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    return True


def _record(out: pathlib.Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((out / "run.json").read_text())
    except (OSError, ValueError):
        return None  # not written yet, or being replaced
    return doc if isinstance(doc, dict) else None


def scan(root: pathlib.Path, now: float | None = None) -> list[RunSummary]:
    """The runs under `root`, in push order.

    `root` is either one run's output directory (`mlops run --out`) or a
    runs directory of the post-receive hook (`<runs>/<sha>/out`, with the
    run's `pid` and `push.json` beside it).
    """
    root = pathlib.Path(root)
    now = time.time() if now is None else now
    if (root / EVENTS_FILE).is_file() or (root / "run.json").is_file():
        return [summarize(root.name, root, read(root), _record(root), None, now)]
    if not root.is_dir():
        return []
    found = []
    for home in root.iterdir():
        if not (home / "push.json").is_file() and not (home / "out").is_dir():
            continue  # not a run (the queue's lock, something else in the directory)
        out = home / "out"
        try:
            pushed = float(json.loads((home / "push.json").read_text()).get("at", 0))
        except (OSError, ValueError, AttributeError):
            pushed = home.stat().st_mtime
        summary = summarize(home.name[:12], out, read(out), _record(out),
                            _alive(home / "pid"), now)
        found.append((pushed, summary))  # push order: a queued run has not started yet
    return [summary for _, summary in sorted(found, key=lambda pair: pair[0])]
