"""`evaluate`: COCO mAP@0.5 and mAP@[.5:.95] of the trained model on the val set.

First checks what the training job left (the PaddleJob's workers only run
the model repo's own command, so this is the first step that can say a
training "succeeded" without an export), then writes `metrics.json` beside
the model, records the metrics into the model's `model.yaml`, and outputs
`map50`, `map`, the model's `version` and `model_dir` as parameters.

With a model in production (the stable version in `--production-from-gitops`,
`promotion.gitrepo.production`) whose export this step can read, both exports run
through the serving stack on the same images, the val set and the
holdout set (`mlops.yaml`'s pinned `data.holdout`, or `--holdout` for a repo
without one) (`workflows.paired_evaluation`): the metrics are
then the served candidate's on the val set ("judge what we ship") and
`paired.json` holds the paired bootstrap the gate judges. Without one (the
first push) the metrics are those of the model's own `bbox.json`, as before.
"""

import argparse
import json
import pathlib
from typing import Any, Sequence

from contracts.artifact import read_record_data, write_record_data
from promotion.gitrepo.production import read_production
from workflows.config import load_config
from workflows.evaluation import EvaluationError, evaluate_detections
from workflows.paired_evaluation import PAIRED_FILE, EvalSet, compare_with_production
from workflows.served_cache import ServedCache
from workflows.steps.common import base_parser, run_main
from workflows.steps.data_lineage import (
    pinned_lock,
    prepared_holdout,
    prepared_val,
    record_dataset,
)
from workflows.steps.training_job import check_artifact


def _production_dir(gitops: str, model: str, branch: str) -> tuple[str, pathlib.Path] | None:
    """(version, export dir) of production when there is one this step can run."""

    found = read_production(gitops, model, branch)
    if found is None:
        print(f"production: no stable version of {model}; evaluating the candidate alone",
              flush=True)
        return None
    if found.model_dir is None or not (found.model_dir / "infer_cfg.yml").is_file():
        # Not an export this step can run (a model-uri outside the models volume, or a
        # record without its program): the gate falls back to production's recorded metrics.
        print(f"production: {model} {found.version}'s export is not readable here "
              f"({found.model_dir or 'no file:// model-uri'}); not run on these images",
              flush=True)
        return None
    return found.version, found.model_dir


def run(repo: str, out: str, which: str = "full", production_from_gitops: str = "",
        gitops_branch: str = "main", holdout: str = "",
        holdout_images: str = "") -> dict[str, Any]:
    """Evaluate `out/<which>`'s detections (and production's, on the same images);
    returns output parameters."""
    loaded = load_config(repo)
    output_dir = pathlib.Path(out).resolve() / which
    artifact = check_artifact(output_dir, loaded.config.evaluation.predictions,
                              loaded.config.model)
    annotations = loaded.repo_dir / loaded.config.evaluation.annotations
    image_root = annotations.parent  # COCO file_names relative to the annotations' folder
    pinned = pinned_lock(loaded, out)
    pinned_holdout = None
    if pinned is not None:  # the val split prepare-data verified, not the checkout's copy
        annotations, image_root = prepared_val(pinned)
        pinned_holdout = prepared_holdout(loaded, pinned)
    if pinned_holdout is not None and holdout:
        raise EvaluationError(f"--holdout {holdout}: {loaded.path.name} pins data.holdout "
                              f"({pinned_holdout[0]} once prepared); give one holdout, not both")
    predictions = output_dir / loaded.config.evaluation.predictions
    (output_dir / PAIRED_FILE).unlink(missing_ok=True)  # a retried step judges afresh
    production = (_production_dir(production_from_gitops, loaded.config.model,
                                  gitops_branch or "main") if production_from_gitops else None)
    if production is not None:
        version, prod_dir = production
        sets = [EvalSet("val", annotations, image_root)]
        if holdout:
            path = pathlib.Path(holdout)
            if not path.is_file():
                raise EvaluationError(f"--holdout {path}: not found")
            sets.append(EvalSet("holdout", path,
                                pathlib.Path(holdout_images) if holdout_images else path.parent))
        elif pinned_holdout is not None:
            sets.append(EvalSet("holdout", *pinned_holdout))
        print(f"production: {loaded.config.model} {version}; both exports run through the "
              f"serving stack on the same images ({', '.join(s.name for s in sets)})", flush=True)
        doc = compare_with_production(sets, output_dir / "model", prod_dir, version, output_dir,
                                      ServedCache.from_env())
        val = doc["sets"][0]
        metrics = {**val["candidate_metrics"], "images": val["paired"]["images"],
                   "source": "served export", "production": version}
    else:
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
    parser.add_argument(
        "--production-from-gitops", metavar="REPO", default="",
        help="GitOps repo (path or URL) whose stable version is run on the same images "
             "(empty: the candidate alone)")
    parser.add_argument("--gitops-branch", default="main", help="branch of the GitOps repo")
    parser.add_argument("--holdout", default="", metavar="ANNOTATIONS",
                        help="a fixed holdout set's COCO annotations, compared on as well "
                             "(for a repo whose mlops.yaml pins no data.holdout)")
    parser.add_argument("--holdout-images", default="", metavar="DIR",
                        help="folder the holdout's file_names are relative to "
                             "(default: the annotations' folder)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Container / CLI entry."""
    parser = build_parser()
    return run_main(lambda a: run(a.repo, a.out, a.which, a.production_from_gitops,
                                  a.gitops_branch, a.holdout, a.holdout_images), parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
