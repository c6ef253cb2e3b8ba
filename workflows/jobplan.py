"""Which training jobs a push needs: the smoke job, and the full job's workers (pure).

The smoke job (`training.smoke`, one worker, a few steps on a data subset) is
there to fail fast and cheaply before the full job spends its resources. Two
kinds of push get nothing from it, so the pipeline renders no `smoke-train`
task for them and `train` waits on what the smoke job would have waited on:

* the full job trains no step (`epochs: 0`): it only re-exports the weights it
  starts from (a push that changes serving flags only, e.g. a drill);
* the full job's `max-steps` is at most the smoke job's: it is no bigger than
  the smoke job, so the smoke job would only run it twice.

A full job with epochs > 0 and no `max-steps` (or `max-steps: 0`, no cap)
always keeps its smoke job. The args compared are the merged ones each
PaddleJob gets (the template's, then `mlops.yaml`'s overrides).

A full job that trains no step runs as ONE worker whatever `workers:` says:
there is no collective to form, and rank 0 alone writes the export.

When a decision changes the usual DAG, its reason goes on the WorkflowTemplate
as an annotation (`PLAN_ANNOTATIONS`), which the local runner prints at the
start of a run.
"""

import re
from typing import Any

from workflows.config import LoadedConfig
from workflows.resources import ResourceTemplate

SMOKE_ANNOTATION = "mlops.dev/smoke-train"
WORKERS_ANNOTATION = "mlops.dev/train-workers"
PLAN_ANNOTATIONS = (SMOKE_ANNOTATION, WORKERS_ANNOTATION)


def _count(args: dict[str, Any], key: str) -> int | None:
    """An integer training arg (`epochs: 0`, `max-steps: "20"`), or None when absent or
    not a whole number (the decision then keeps the safe default). `max_steps` is the same
    flag (`workflows.worker_command.arg_flags`); the last one written wins, as on the command
    line."""
    values = [v for k, v in args.items() if str(k).replace("_", "-") == key]
    value = values[-1] if values else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        return int(value)
    return None


def trains_no_step(full: ResourceTemplate) -> bool:
    """The full job only re-exports its starting weights (`epochs: 0`)."""
    return _count(full.args, "epochs") == 0


def smoke_needed(loaded: LoadedConfig) -> tuple[bool, str]:
    """Whether the pipeline runs the smoke job before the full one, and why (one line)."""
    full, smoke = loaded.full.args, loaded.smoke.args
    if trains_no_step(loaded.full):
        return False, ("skipped: the full job trains no step (epochs: 0), it only re-exports "
                       "the weights it starts from")
    full_steps, smoke_steps = _count(full, "max-steps"), _count(smoke, "max-steps")
    if full_steps is None or full_steps <= 0:
        return True, "runs: the full job has no step cap (max-steps), the smoke job fails faster"
    if smoke_steps is None or smoke_steps <= 0:
        return True, "runs: the smoke job has no step cap (max-steps) to compare with"
    if full_steps <= smoke_steps:
        return False, (f"skipped: the full job's max-steps {full_steps} is at most the smoke "
                       f"job's {smoke_steps}, so it fails as fast as the smoke job would")
    return True, (f"runs: the full job's max-steps {full_steps} is more than the smoke "
                  f"job's {smoke_steps}")


def full_job(loaded: LoadedConfig) -> tuple[ResourceTemplate, str]:
    """The full job as its PaddleJob runs it, and why it has that many workers (one line)."""
    job = loaded.full
    if trains_no_step(job) and job.workers > 1:
        return job.model_copy(update={"workers": 1}), (
            f"1 (training.full asks {job.workers}): the full job trains no step (epochs: 0), "
            "so there is no collective to form and rank 0 alone writes the export")
    return job, f"{job.workers} (training.full)"


def plan_annotations(loaded: LoadedConfig) -> dict[str, str]:
    """The reasons of the decisions that change the usual DAG (no smoke job, fewer workers
    than `training.full` asks), as the WorkflowTemplate's annotations; none otherwise."""
    needed, why_smoke = smoke_needed(loaded)
    job, why_workers = full_job(loaded)
    return {**({} if needed else {SMOKE_ANNOTATION: why_smoke}),
            **({} if job.workers == loaded.full.workers else {WORKERS_ANNOTATION: why_workers})}
