"""Push-to-canary-start, split into its parts (pure; the demo records the instants).

    push ──pipeline──> run done ──approval──> merged ──sync──> canary at 10 % ──canary──> promoted

The pipeline part is split further with the runner's own task timings
(`run.json`): data (prepare-data: fetch, verify, validate the pinned dataset),
training (the smoke PaddleJob where the run has one, `workflows.jobplan`, and
the full one), evaluation, proposal
(gate + propose); what is left is overhead: the hook, the queue, checkout,
the image build stand-in and the runner itself. The parts add up to the
whole, so nothing is hidden in a gap.
"""

from typing import Any

DATA = ("prepare-data",)
TRAINING = ("smoke-train", "train")
EVALUATION = ("evaluate",)
PROPOSAL = ("gate", "propose")


def task_seconds(run: dict[str, Any]) -> dict[str, float]:
    """Seconds per task from a `run.json` document."""
    return {str(t["name"]): float(t.get("seconds") or 0.0) for t in run.get("tasks", [])}


def breakdown(marks: dict[str, float], run: dict[str, Any]) -> dict[str, Any]:
    """Durations from the instants in `marks` (epoch seconds) and the run's task timings.

    `marks` holds `push`, `run_done`, and when they happened `approved`,
    `canary_start`, `finished`.
    """
    tasks = task_seconds(run)
    pipeline = marks["run_done"] - marks["push"]
    data = sum(tasks.get(name, 0.0) for name in DATA)
    training = sum(tasks.get(name, 0.0) for name in TRAINING)
    evaluation = sum(tasks.get(name, 0.0) for name in EVALUATION)
    proposal = sum(tasks.get(name, 0.0) for name in PROPOSAL)
    parts: dict[str, float] = {
        "pipeline_overhead_s": pipeline - data - training - evaluation - proposal,
        "data_s": data,
        "training_s": training,
        "evaluation_s": evaluation,
        "proposal_s": proposal,
    }
    out: dict[str, Any] = {"pipeline_s": pipeline, "tasks_s": tasks}
    if "approved" in marks:
        parts["approval_s"] = marks["approved"] - marks["run_done"]
    if "canary_start" in marks and "approved" in marks:
        parts["sync_s"] = marks["canary_start"] - marks["approved"]
        out["push_to_canary_start_s"] = marks["canary_start"] - marks["push"]
    if "finished" in marks:
        out["push_to_finished_s"] = marks["finished"] - marks["push"]
        if "canary_start" in marks:
            out["canary_s"] = marks["finished"] - marks["canary_start"]
    out["parts"] = {k: round(v, 3) for k, v in parts.items()}
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in out.items()}
