"""The Runs page's data: each local pipeline run's steps, from its own records.

`workflows.run_events.scan` says how each run stands (`mlops status --runs`);
`run_events.read` gives its steps in order -- started, finished with phase,
seconds and outputs, and the log each step writes. A log is served only from
inside a run's output directory. Every run says what the gate made of it
(:func:`gate_view`): its verdict and reason, or why it has none.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Any, Mapping, Sequence

from mlops.errors import UserError
from workflows import run_events
from workflows.run_compare import compare, read_run, record_of_workflow

LOG_TAIL = 64 * 1024


def steps(events: Sequence[run_events.RunEvent], now: float) -> list[dict[str, Any]]:
    """One entry per task in the order they started: state, seconds, outputs, log."""
    out: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.kind == "task_started":
            out[e.task] = {"task": e.task, "state": "Running", "started_at": e.at,
                           "seconds": None, "message": "", "outputs": {}, "log": e.log}
        elif e.kind == "task_finished":
            step = out.setdefault(e.task, {"task": e.task, "started_at": None, "log": e.log})
            step.update(state=e.phase or "Succeeded", seconds=e.seconds, message=e.message,
                        outputs=dict(e.outputs))
            step["log"] = step.get("log") or e.log
    for step in out.values():
        if step["state"] == "Running" and step["started_at"]:
            step["seconds"] = round(now - step["started_at"], 1)
        if "train" in step["task"] and step.get("log"):
            from mlops.demo.story import training_log  # the demo's reader of train.py's log

            found = training_log(pathlib.Path(step["log"]))
            if found["total"] or found["loss"] is not None:
                step["training"] = found
    return list(out.values())


FINISHED = ("Succeeded", "Failed", "Error", "Died")


def gate_view(run: Mapping[str, Any], record: Mapping[str, Any] | None = None) -> dict[str, str]:
    """What the gate made of a run: `verdict` (passed, review, refused, failed, running,
    pending, not reached) and `reason`, from the gate step's outputs (`passed`, `outcome`,
    `reason`), else the run record's `gate`, else the run's state (pure). `review` is the
    gate's inconclusive outcome: proposed for a person to decide."""
    gate = next((s for s in run.get("steps") or [] if "gate" in str(s.get("task", ""))), None)
    outputs = (gate or {}).get("outputs") or {}
    verdict = (record or {}).get("gate")
    verdict = verdict if isinstance(verdict, Mapping) else {}
    passed = str(outputs.get("passed", "")).lower()
    if passed not in ("true", "false") and isinstance(verdict.get("passed"), bool):
        passed = str(verdict["passed"]).lower()
    outcome = str(outputs.get("outcome") or verdict.get("outcome") or "")
    if passed in ("true", "false") or outcome == "review":
        reason = (outputs.get("reason") or verdict.get("reason") or
                  (gate or {}).get("message") or "")
        word = "review" if outcome == "review" else \
            "passed" if passed == "true" else "refused"
        return {"verdict": word, "reason": str(reason)}
    status, task, message = run.get("status", ""), run.get("task", ""), run.get("message", "")
    if gate is not None and gate.get("state") in ("Failed", "Error"):
        return {"verdict": "failed", "reason": str(gate.get("message") or
                                                   "the gate step failed without a verdict")}
    if gate is not None and gate.get("state") == "Running":
        return {"verdict": "running", "reason": "the gate is judging the candidate"}
    if status in FINISHED:
        if task:
            why = f"{task} {status.lower()} before the gate" + (f": {message}" if message else "")
        else:
            why = f"the run {status.lower()} without a gate step"
        return {"verdict": "not reached", "reason": why}
    return {"verdict": "pending",
            "reason": f"the run is at {task}" if task else "the run has not started"}


def _record(out: pathlib.Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((out / "run.json").read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def runs_view(roots: Sequence[pathlib.Path], now: float | None = None) -> list[dict[str, Any]]:
    """Every run under the roots, newest first, with its steps and its gate."""
    now = time.time() if now is None else now
    found = []
    for root in roots:
        for summary in run_events.scan(root, now):
            view = dataclasses.asdict(summary)
            view["steps"] = steps(run_events.read(pathlib.Path(summary.out)), now)
            view["gate_view"] = gate_view(view, _record(pathlib.Path(summary.out)))
            found.append(view)
    return list(reversed(found))


def read_log(roots: Sequence[pathlib.Path], path: str) -> str:
    """The tail of a step's log, if `path` is inside one of the runs' directories."""
    target = pathlib.Path(path).resolve()
    if not any(target.is_relative_to(pathlib.Path(r).resolve()) for r in roots):
        raise UserError(f"{path}: not a log of a run under {', '.join(map(str, roots))}")
    if not target.is_file():
        return ""
    with target.open("rb") as fh:
        size = fh.seek(0, 2)
        fh.seek(max(0, size - LOG_TAIL))
        return fh.read().decode(errors="replace")


def compare_view(roots: Sequence[pathlib.Path], outs: Sequence[str],
                 argo: Any = None) -> dict[str, Any]:
    """Two or more of the listed runs side by side (`workflows.run_compare`, as
    `mlops runs compare` prints them): local runs under the UI's run directories, and
    `argo:NAME` Workflows from its Argo Server."""

    if len(outs) < 2:
        raise UserError("compare: pick two or more runs (run=OUT&run=OUT)")
    records = []
    for out in outs:
        if out.startswith("argo:"):
            if argo is None:
                raise UserError(f"compare: run={out}: no Argo Server (start `mlops ui` with "
                                "--argo-server URL)")
            wf = argo.workflow(out.removeprefix("argo:"))
            records.append(record_of_workflow(wf, argo.train_log(wf)))
            continue
        target = pathlib.Path(out).resolve()
        if not any(target.is_relative_to(pathlib.Path(r).resolve()) for r in roots):
            raise UserError(f"compare: run={out}: not a run under "
                            f"{', '.join(map(str, roots)) or '(no --runs)'}")
        records.append(read_run(pathlib.Path(out)))
    return compare(records)
