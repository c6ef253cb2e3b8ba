"""Shared body of `smoke-train` and `train`: run a job, check its artifact."""

import pathlib
import shutil
from typing import Any

import yaml

from workflows.config import load_config
from workflows.errors import StepError
from workflows.resources import ResourceTemplate
from workflows.steps.common import lineage_env
from workflows.training import run_training

MODEL_FILES = ("inference.pdiparams", "infer_cfg.yml", "model.yaml")


def check_artifact(output_dir: pathlib.Path, predictions: str) -> dict[str, Any]:
    """The training output must hold a loadable export and detections."""
    model_dir = output_dir / "model"
    missing = [f for f in MODEL_FILES if not (model_dir / f).is_file()]
    if not ((model_dir / "inference.json").is_file() or (model_dir / "inference.pdmodel").is_file()):
        missing.append("inference.json (or inference.pdmodel)")
    if not (output_dir / predictions).is_file():
        missing.append(f"../{predictions}")
    if missing:
        raise StepError(
            f"training finished but its output {model_dir} lacks: {', '.join(missing)} "
            "(train.py must export with paddle.jit.save and write infer_cfg.yml, model.yaml "
            "and the val detections)"
        )
    record = yaml.safe_load((model_dir / "model.yaml").read_text()) or {}
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
    """Run the `smoke` or `full` job of a model repo into `out/<which>`."""
    loaded = load_config(repo)
    job = job_override or (loaded.smoke if which == "smoke" else loaded.full)
    output_dir = pathlib.Path(out).resolve() / which
    checkpoint_dir = output_dir / "checkpoints"
    if fresh and output_dir.exists():
        shutil.rmtree(output_dir)
    seconds = run_training(
        loaded.repo_dir,
        loaded.config.training.command,
        job,
        output_dir,
        checkpoint_dir,
        env=lineage_env(),
        timeout=timeout,
    )
    result = check_artifact(output_dir, loaded.config.evaluation.predictions)
    result["output_dir"] = str(output_dir)
    result["seconds"] = round(seconds, 3)
    result["workers"] = job.workers
    return result
