"""Shared body of `smoke-train` and `train`: run a job, check its artifact."""

import pathlib
import shutil
import sys
from typing import Any

import yaml

from cogs.containers import Mounts
from cogs.ports import free_port
from contracts.artifact import ArtifactError, missing_files, read_record_data
from workflows import paddlejob_local
from workflows.config import load_config
from workflows.errors import StepError
from workflows.expressions import substitute
from workflows.jobplan import full_job
from workflows.paddlejob import paddlejob_manifest
from workflows.pod_paths import PATH_ENV
from workflows.resources import ResourceTemplate
from workflows.settings import PipelineSettings
from workflows.steps.common import lineage_env


def check_artifact(output_dir: pathlib.Path, predictions: str,
                   model: str | None = None) -> dict[str, Any]:
    """The training output must hold a loadable export and detections, and its record
    must name `model` (the repo's, bound by the platform): the pushed code writes
    `model.yaml`, and its `name` chose where publish and propose put the candidate
    (`name: b` published under `b/` and proposed `apps/b/`)."""
    model_dir = output_dir / "model"
    missing = missing_files(model_dir)
    if not (output_dir / predictions).is_file():
        missing.append(f"../{predictions}")
    if missing:
        raise StepError(
            f"training finished but its output {model_dir} lacks: {', '.join(missing)} "
            "(train.py must export with paddle.jit.save and write infer_cfg.yml, model.yaml "
            "and the val detections)"
        )
    try:
        record = read_record_data(model_dir)
    except ArtifactError as exc:
        raise StepError(str(exc)) from None
    named = record.get("name")
    if model is not None and named != model:
        raise StepError(f"{model_dir / 'model.yaml'}: name {named!r} is not this repo's model "
                        f"({model!r}); a repo trains and publishes only its own model")
    return {
        "model_dir": str(model_dir.resolve()),
        "version": str(record.get("version", "")),
        "weights_sha256": str(record.get("weights_sha256", "")),
    }


def run_job(
    repo: str | pathlib.Path,
    out: str | pathlib.Path,
    which: str,
    *,
    fresh: bool,
    job_override: ResourceTemplate | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run the `smoke` or `full` job of a model repo into `out/<which>`.

    The job is the PaddleJob the pipeline renders for it, run by the same
    local executor as the runner's (`workflows.paddlejob_local`): one process
    per worker with the pod's command, env and workingDir plus the operator's
    env. Workflow parameters become the local lineage (`MLOPS_TRAINING_COMMIT`,
    `MLOPS_WORKFLOW_ID` when set).
    """
    loaded = load_config(repo)
    # the full job as the pipeline renders it (`workflows.jobplan`: one worker for `epochs: 0`)
    job = job_override or (loaded.smoke if which == "smoke" else full_job(loaded)[0])
    root = pathlib.Path(out).resolve()
    output_dir = root / which
    if fresh and output_dir.exists():
        shutil.rmtree(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    lineage = lineage_env()
    manifest = paddlejob_manifest(loaded, job, which, PipelineSettings())
    # What Argo substitutes when it creates the job; any other `{{...}}` is an error, as there.
    text = substitute(yaml.safe_dump(manifest), {
        "workflow.name": lineage.get("MLOPS_WORKFLOW_ID", "local"),
        "workflow.parameters.revision": lineage.get("MLOPS_TRAINING_COMMIT", ""),
        "inputs.parameters.image": "local",
    }, f"the {which} PaddleJob")
    local = {"MLOPS_REPO": str(loaded.repo_dir.resolve()), "MLOPS_OUT": str(root),
             "MLOPS_OUTPUTS": str(root / "outputs")}

    mounts = Mounts({PATH_ENV[key]: path for key, path in local.items()})
    try:
        specs = paddlejob_local.worker_specs(yaml.safe_load(text), port=free_port(),
                                             mounts=mounts, local_env=local)
    except paddlejob_local.PaddleJobFailed as exc:
        raise StepError(str(exc)) from None
    log_path = output_dir / "train.log"
    try:
        with open(log_path, "ab") as log:
            seconds = paddlejob_local.run_paddlejob(specs, log, name=f"{which} job",
                                                    timeout=timeout, echo=sys.stdout.buffer)
    except paddlejob_local.PaddleJobFailed as exc:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
        raise StepError(f"{exc}; log: {log_path}\n--- last lines ---\n{tail}") from None
    result = check_artifact(output_dir, loaded.config.evaluation.predictions)
    result["output_dir"] = str(output_dir)
    result["seconds"] = round(seconds, 3)
    result["workers"] = job.workers
    return result
