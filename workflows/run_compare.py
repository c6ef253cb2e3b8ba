"""Runs side by side: what `mlops runs compare A B` prints and the UI's Compare view shows.

A local run leaves its own records (`local.argo.runner`): `run.json` (status,
seconds, the pipeline's parameters, the gate's verdict, each task's phase,
seconds and outputs), the evaluation's `metrics.json`, the exported model's
`model.yaml` (hyperparameters, dataset digest or pins, metrics) and each task's
log, where `train.py` writes `step=N epoch=E loss=L` lines. :func:`read_run`
gathers them into a :class:`RunRecord` (a missing file is a missing row, never an
error); :func:`compare` lines two or more records up row by row and marks the rows
whose values differ, like the run comparison views of Kubeflow Pipelines and
MLflow. Reading is thin; everything after it is pure.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import pathlib
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import yaml

from contracts.errors import ExitCode, MlopsError
from workflows import run_events

__all__ = ["RunNotFound", "RunRecord", "compare", "find_run", "loss_curve", "read_run",
           "record_of_workflow", "render_table"]

#: `step=N epoch=E loss=L` (train.py's progress line; `[worker-K]` prefixes kept apart).
_LOSS = re.compile(r"^(?:\[worker-(?P<worker>\d+)\]\s*)?.*\bstep=(?P<step>\d+)\b.*"
                   r"\bloss=(?P<loss>[-+0-9.eEinfa]+)")
SECTIONS = ("run", "parameters", "dataset", "metrics", "gate", "durations")


class RunNotFound(MlopsError):
    """A run named on the command line or in a request that has no records."""

    exit_code = ExitCode.NOT_FOUND


@dataclass(frozen=True)
class RunRecord:
    """One run's comparable facts, each section a flat name -> value mapping."""

    name: str
    out: str
    run: dict[str, Any] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)
    dataset: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    gate: dict[str, Any] = field(default_factory=dict)
    durations: dict[str, Any] = field(default_factory=dict)
    loss: list[tuple[int, float]] = field(default_factory=list)


def loss_curve(text: str) -> list[tuple[int, float]]:
    """(step, loss) from a training log, of the first worker that logged (pure)."""
    by_worker: dict[str, list[tuple[int, float]]] = {}
    for line in text.splitlines():
        found = _LOSS.match(line)
        if not found:
            continue
        try:
            loss = float(found["loss"])
        except ValueError:
            continue
        if math.isfinite(loss):
            by_worker.setdefault(found["worker"] or "", []).append((int(found["step"]), loss))
    if not by_worker:
        return []
    return sorted(by_worker[min(by_worker)])


def _json(path: pathlib.Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _yaml(path: pathlib.Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, inner in sorted(value.items()):
            _flat(f"{prefix}.{key}" if prefix else str(key), inner, out)
    else:
        out[prefix] = value


def find_run(name: str, roots: Sequence[pathlib.Path] = ()) -> pathlib.Path:
    """A run's output directory from a path (the `--out` dir, or a hook's run dir holding
    `out/`) or a name (a pushed commit's prefix, a run directory's name) under `roots`."""
    path = pathlib.Path(name).expanduser()
    for candidate in (path, path / "out"):
        if (candidate / "run.json").is_file() or (candidate / run_events.EVENTS_FILE).is_file():
            return candidate
    matches = []
    for root in roots:
        for summary in run_events.scan(pathlib.Path(root)):
            out = pathlib.Path(summary.out)
            if summary.name == name or out.name == name or out.parent.name.startswith(name):
                matches.append(out)
    if len(matches) == 1:
        return matches[0]
    where = f" under {', '.join(map(str, roots))}" if roots else ""
    if matches:
        raise RunNotFound(f"run {name!r}{where} is ambiguous: "
                          f"{', '.join(str(m) for m in matches)}")
    raise RunNotFound(f"run {name!r}: no run records (run.json, {run_events.EVENTS_FILE}) at "
                      f"{path}{where}")


def read_run(out: pathlib.Path) -> RunRecord:
    """Everything comparable a run left in `out` (the files it has; the rest stays empty)."""
    out = pathlib.Path(out)
    record = _json(out / "run.json")
    events = run_events.read(out)
    summary = run_events.summarize(out.parent.name[:12] if out.name == "out" else out.name,
                                   out, events, record or None, None, 0.0)
    tasks = record.get("tasks") or []
    outputs: dict[str, str] = {}
    for task in tasks:
        outputs.update({k: str(v) for k, v in (task.get("outputs") or {}).items()})
    outputs.update({k: str(v) for k, v in (record.get("outputs") or {}).items()})
    model_dir = pathlib.Path(outputs.get("model_dir") or out / "full" / "model")
    model = _yaml(model_dir / "model.yaml")
    metrics_doc = _json(pathlib.Path(outputs.get("metrics_file") or out / "full" / "metrics.json"))

    parameters: dict[str, Any] = {}
    _flat("", {k: v for k, v in (record.get("parameters") or {}).items()}, parameters)
    _flat("hyperparameters", model.get("hyperparameters") or {}, parameters)
    dataset: dict[str, Any] = {}
    if model.get("dataset_digest"):
        dataset["digest"] = model["dataset_digest"]
    for key in ("datasets", "dataset_pins", "pins"):
        if model.get(key):
            _flat(key, model[key], dataset)
    metrics: dict[str, Any] = {}
    _flat("", {**(model.get("metrics") or {}), **metrics_doc}, metrics)
    gate: dict[str, Any] = {}
    verdict = record.get("gate") or {}
    if isinstance(verdict, dict) and verdict:
        gate = {"passed": verdict.get("passed"), "metric": verdict.get("metric"),
                "value": verdict.get("value"), "minimum": verdict.get("minimum"),
                "production": verdict.get("production"), "reason": verdict.get("reason")}
    elif summary.gate:
        gate = {"passed": summary.gate == "passed"}
    durations = {"total": record.get("seconds", summary.seconds)}
    for task in tasks:
        durations[str(task.get("name"))] = task.get("seconds")
    if not tasks:
        durations.update({e.task: e.seconds for e in events if e.kind == "task_finished"})
    loss: list[tuple[int, float]] = []
    train = next((t for t in tasks if t.get("name") == "train"), None) or \
        next((e.__dict__ for e in events if e.task == "train" and e.log), None)
    if train and train.get("log"):
        try:
            loss = loss_curve(pathlib.Path(train["log"]).read_text(errors="replace"))
        except OSError:
            loss = []
    return RunRecord(
        name=summary.name, out=str(out),
        run={"status": summary.status, "workflow": record.get("workflow", ""),
             "version": outputs.get("version") or model.get("version", ""),
             "training_commit": model.get("training_commit", "")},
        parameters=parameters, dataset=dataset, metrics=metrics, gate=gate,
        durations=durations, loss=loss)


def _value(text: str) -> Any:
    try:
        return float(text) if text.strip() not in ("", "true", "false") else \
            {"true": True, "false": False}.get(text.strip(), text)
    except ValueError:
        return text


def _seconds(node: dict[str, Any]) -> float | None:
    try:
        start, end = (dt.datetime.fromisoformat(str(node[k]).replace("Z", "+00:00"))
                      for k in ("startedAt", "finishedAt"))
    except (KeyError, ValueError):
        return None
    return (end - start).total_seconds()


def record_of_workflow(wf: dict[str, Any], train_log: str = "") -> RunRecord:
    """An Argo Workflow (the Argo Server's JSON) as a run record (pure): its arguments are
    the parameters, each step's output parameters its metrics, the gate step's its
    verdict, each Pod node's start to finish its duration; the loss from the train
    step's log when the caller fetched it."""
    meta, spec, status = (wf.get(k) or {} for k in ("metadata", "spec", "status"))
    parameters = {str(p["name"]): p.get("value") for p in
                  ((spec.get("arguments") or {}).get("parameters") or []) if "name" in p}
    metrics: dict[str, Any] = {}
    gate: dict[str, Any] = {}
    durations: dict[str, Any] = {"total": _seconds(status)}
    outputs: dict[str, str] = {}
    pods = sorted((n for n in (status.get("nodes") or {}).values() if n.get("type") == "Pod"),
                  key=lambda n: n.get("startedAt") or "")
    for node in pods:
        task = str(node.get("displayName") or node.get("name"))
        durations[task] = _seconds(node)
        params = {str(p["name"]): str(p.get("value", "")) for p in
                  ((node.get("outputs") or {}).get("parameters") or []) if "name" in p}
        outputs.update(params)
        if "gate" in task:
            gate.update({k: _value(v) for k, v in params.items()})
        elif "evaluate" in task:
            metrics.update({k: _value(v) for k, v in params.items()
                            if isinstance(_value(v), float)})
    if not gate and "passed" in outputs:
        gate["passed"] = _value(outputs["passed"])
    return RunRecord(
        name=str(meta.get("name", "?")), out=f"argo:{meta.get('name', '?')}",
        run={"status": status.get("phase", ""), "workflow": meta.get("name", ""),
             "version": outputs.get("version", ""), "training_commit":
             parameters.get("revision", "")},
        parameters=parameters, metrics=metrics, gate=gate, durations=durations,
        loss=loss_curve(train_log))


def compare(records: Sequence[RunRecord]) -> dict[str, Any]:
    """Rows per section, one value per run, `differs` where the runs disagree (pure)."""
    rows = []
    for section in SECTIONS:
        keys: list[str] = []
        for r in records:
            keys += [k for k in getattr(r, section) if k not in keys]
        for key in keys:
            values = [getattr(r, section).get(key) for r in records]
            rows.append({"section": section, "key": key, "values": values,
                         "differs": len({json.dumps(v, sort_keys=True) for v in values}) > 1})
    final = [r.loss[-1][1] if r.loss else None for r in records]
    rows.append({"section": "training", "key": "final loss", "values": final,
                 "differs": len(set(final)) > 1})
    return {"runs": [{"name": r.name, "out": r.out} for r in records], "rows": rows,
            "loss": [[list(p) for p in r.loss] for r in records]}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    text = str(value)
    return text if len(text) <= 40 else text[:18] + "…" + text[-18:]


def render_table(comparison: dict[str, Any], all_rows: bool = True) -> str:
    """The comparison as a text table; rows that differ start with `*` (pure)."""
    names = [r["name"] for r in comparison["runs"]]
    body = [(("* " if row["differs"] else "  ") + f"{row['section']}.{row['key']}",
             [_cell(v) for v in row["values"]])
            for row in comparison["rows"] if all_rows or row["differs"]]
    width = max([len(k) for k, _ in body] + [6])
    cols = [max([len(n)] + [len(cells[i]) for _, cells in body]) for i, n in enumerate(names)]
    lines = ["  " + "".ljust(width - 2) + "  " + "  ".join(n.ljust(w) for n, w in zip(names, cols))]
    for key, cells in body:
        lines.append(key.ljust(width) + "  " + "  ".join(c.ljust(w) for c, w in zip(cells, cols)))
    return "\n".join(line.rstrip() for line in lines)
