"""The export: program, `infer_cfg.yml`, `model.yaml`, `bbox.json`, named by contracts/artifact.py.

    OUT/model/inference.json, inference.pdiparams   paddle.jit.save (:func:`save_program`)
    OUT/model/infer_cfg.yml                          the repo's serving description (+ fault:)
    OUT/model/model.yaml                             the record: version, weights sha256, lineage
    OUT/bbox.json                                    COCO detections of the exported program

The repo decides what `infer_cfg.yml` says and computes its detections with
the *exported* program (:func:`predictor`); the kit writes the files, each
atomically, under the names every other room reads, and derives the version.

A fault drill (`--drill-*`) is declared, not trained: `infer_cfg.yml` gets a
`fault:` section (the server then slows or fails that share of requests on
purpose) and `model.yaml` a `drill:` record. The version is derived from the
weights and the drill, so a drill never shares a version with its clean twin.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import pathlib
from typing import Any, Sequence

import yaml

from contracts.artifact import (
    INFER_CFG_FILE,
    PARAMS_FILE,
    program_file,
    sha256_file,
    write_record_data,
)
from modelkit.files import atomic_write_text

__all__ = ["ExportContext", "declared_drill", "drill_fault", "model_version", "predictor",
           "save_program", "write_export"]

MODEL_DIR = "model"  #: OUT/model: the artifact directory inside the output dir
DETECTIONS_FILE = "bbox.json"


@dataclasses.dataclass(frozen=True)
class ExportContext:
    """What the training loop hands the repo's export (rank 0, after the last step)."""

    args: argparse.Namespace
    out_dir: pathlib.Path
    dataset_digest: str
    total_steps: int
    world: int

    @property
    def model_dir(self) -> pathlib.Path:
        """`OUT/model`, where the artifact goes."""
        return self.out_dir / MODEL_DIR

    def hyperparameters(self) -> dict[str, Any]:
        """`model.yaml`'s `hyperparameters:`: the flags that shaped the weights."""
        a = self.args
        return {"epochs": a.epochs, "batch_size": a.batch_size, "lr": a.lr,
                "max_steps": a.max_steps, "subset": a.subset, "seed": a.seed,
                "steps": self.total_steps, "workers": self.world,
                "kernels": getattr(a, "kernel_path", "auto")}


def drill_fault(delay_ms: float = 0.0, error_rate: float = 0.0,
                error_status: int = 500) -> dict[str, Any] | None:
    """The infer_cfg.yml ``fault:`` section for the --drill-* flags; None when there is no drill.

    All three keys, as plain floats/int, so the same drill always serialises
    the same way (the version is derived from it).
    """
    if not (delay_ms or error_rate):
        return None
    return {"delay_ms": float(delay_ms), "error_rate": float(error_rate),
            "error_status": int(error_status)}


def declared_drill(args: argparse.Namespace) -> tuple[dict[str, Any] | None,
                                                      dict[str, Any] | None]:
    """(the ``fault:`` section or None, every declared misbehaviour or None) from the flags:
    the second adds ``skew`` to the first, for the version and the lineage."""
    fault = drill_fault(args.drill_delay_ms, args.drill_error_rate, args.drill_error_status)
    skew = {"skew": args.drill_skew} if args.drill_skew != "none" else {}
    return fault, ({**(fault or {}), **skew} or None)


def model_version(weights_sha: str, fault: dict[str, Any] | None = None) -> str:
    """``v-`` + 12 hex: of the weights' sha256, or, with a drill, of sha256(weights sha + drill).

    A drill may be declared on the very weights production serves (the demo's
    slow candidate), and two versions must never share a name; a clean export
    keeps the plain weights-derived version.
    """
    if fault is None:
        return "v-" + weights_sha[:12]
    canonical = json.dumps(fault, sort_keys=True, separators=(",", ":"))
    return "v-" + hashlib.sha256((weights_sha + canonical).encode()).hexdigest()[:12]


def save_program(layer: Any, ctx: ExportContext, input_spec: Sequence[Any]) -> pathlib.Path:
    """`paddle.jit.save` `layer` into the artifact directory under contracts' names."""
    import paddle  # import cost: only the exporting rank pays it

    ctx.model_dir.mkdir(parents=True, exist_ok=True)
    prefix = ctx.model_dir / pathlib.Path(PARAMS_FILE).stem  # paddle adds the suffixes
    paddle.jit.save(layer, str(prefix), input_spec=list(input_spec))
    return ctx.model_dir


def predictor(model_dir: pathlib.Path) -> Any:
    """A `paddle.inference` predictor of the exported program: CPU, one thread, quiet."""
    from paddle import inference

    program = program_file(model_dir)
    if program is None:
        raise FileNotFoundError(f"{model_dir}: no exported program; call save_program first")
    config = inference.Config(str(program), str(pathlib.Path(model_dir) / PARAMS_FILE))
    config.disable_gpu()
    config.set_cpu_math_library_num_threads(1)
    config.disable_glog_info()
    return inference.create_predictor(config)


def write_export(ctx: ExportContext, *, name: str, served_cfg: dict[str, Any],
                 detections: list[dict[str, Any]], postprocess: str,
                 drill: dict[str, Any] | None) -> dict[str, Any]:
    """Write `infer_cfg.yml`, `model.yaml` and `bbox.json` after :func:`save_program`; returns
    the record. `drill` is :func:`declared_drill`'s second value."""
    import paddle

    model_dir = ctx.model_dir
    atomic_write_text(model_dir / INFER_CFG_FILE, yaml.safe_dump(served_cfg, sort_keys=False))
    weights_sha = sha256_file(model_dir / PARAMS_FILE)
    program = program_file(model_dir)
    record: dict[str, Any] = {
        "name": name,
        "version": model_version(weights_sha, drill),
        "weights_sha256": weights_sha,
        "training_commit": os.environ.get("MLOPS_TRAINING_COMMIT", ""),
        "workflow_id": os.environ.get("MLOPS_WORKFLOW_ID", ""),
        "dataset_digest": ctx.dataset_digest,
        "hyperparameters": ctx.hyperparameters(),
        "paddle_version": paddle.__version__,
        "format": {"program": program.name if program else "", "params": PARAMS_FILE,
                   "config": INFER_CFG_FILE, "postprocess": postprocess},
    }
    if drill is not None:  # in the lineage too, so the PR's report says this is a drill
        record["drill"] = drill
    write_record_data(model_dir, record)
    bbox = atomic_write_text(ctx.out_dir / DETECTIONS_FILE, json.dumps(detections))
    print(f"exported {record['version']} to {model_dir}; {len(detections)} val detections "
          f"in {bbox}", flush=True)
    if drill is not None:
        print(f"drill declared in {INFER_CFG_FILE}: {json.dumps(drill)}", flush=True)
    return record

