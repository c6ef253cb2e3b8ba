"""`evaluate`: COCO mAP@0.5 and mAP@[.5:.95] of the trained model on the val set.

First checks what the training job left (the PaddleJob's workers only run
the model repo's own command, so this is the first step that can say a
training "succeeded" without an export), then writes `metrics.json` beside
the model, records the metrics into the model's `model.yaml`, and outputs
`map50`, `map`, the model's `version` and `model_dir` as parameters.
"""

import argparse
import json
import pathlib
from typing import Any, Sequence

from contracts.artifact import read_record_data, write_record_data
from workflows.config import load_config
from workflows.evaluation import evaluate_detections
from workflows.steps.common import base_parser, run_main
from workflows.steps.data_lineage import pinned_lock, record_dataset
from workflows.steps.training_step import check_artifact


def run(repo: str, out: str, which: str = "full") -> dict[str, Any]:
    """Evaluate `out/<which>`'s detections; returns output parameters."""
    loaded = load_config(repo)
    output_dir = pathlib.Path(out).resolve() / which
    artifact = check_artifact(output_dir, loaded.config.evaluation.predictions)
    annotations = loaded.repo_dir / loaded.config.evaluation.annotations
    pinned = pinned_lock(loaded, out)
    if pinned is not None:  # the val split prepare-data verified, not the checkout's copy
        annotations = pinned.parent / "annotations" / "val.json"
    predictions = output_dir / loaded.config.evaluation.predictions
    metrics = evaluate_detections(annotations, predictions)
    metrics_path = output_dir / "metrics.json"
    metrics_path.write_text(json.dumps(metrics, indent=2) + "\n")
    model_dir = output_dir / "model"
    record = read_record_data(model_dir)  # check_artifact above made sure it is there
    record["metrics"] = {k: round(float(metrics[k]), 6) for k in ("map50", "map", "map75")}
    if pinned is not None:
        record_dataset(model_dir, record, pinned)
    write_record_data(model_dir, record)
    return {
        "map50": f"{metrics['map50']:.6f}",
        "map": f"{metrics['map']:.6f}",
        "metrics_file": str(metrics_path),
        "model_dir": artifact["model_dir"],
        "version": artifact["version"],
    }


def build_parser() -> argparse.ArgumentParser:
    """This step's arguments; tests parse every rendered template's argv with it."""
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--which", default="full", choices=["full", "smoke"])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Container / CLI entry."""
    parser = build_parser()
    return run_main(lambda a: run(a.repo, a.out, a.which), parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
