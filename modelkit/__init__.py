"""The model-repo kit: what a team's `train.py` imports so it keeps only its model, loss and data.

The pipeline's contract with a model repo (`mlops.yaml`, the flags the pipeline appends,
the log lines the demo reads, the artifact of contracts/artifact.py) is the same for every
model; this package is that contract written once. A `train.py` builds its parser with
`training_parser`, hands `train` a `Recipe` (net factory, per-step loss, export) and runs
under `run_main`; the loop does the rest (ranks, optimiser, checkpoints, metrics, export).

Its doors are the names below, imported from `modelkit` itself, and the `datasets` and
`synthetic` modules; the modules behind the names are the kit's own. It imports only
`contracts`, `cogs` and third-party libraries (PaddlePaddle, numpy, PyYAML,
prometheus-client), so a training image needs nothing of the pipeline
(`pip install paddle-mlops[kit]`). PaddlePaddle is imported inside the functions that use
it: importing the kit (and a `train.py` for its pure helpers) stays cheap.
"""

from modelkit import datasets, synthetic
from modelkit.argv import check, training_parser
from modelkit.checkpoints import weights_digest
from modelkit.coco import boxes_by_image
from modelkit.errors import TrainError, run_main
from modelkit.export import (
    ExportContext,
    declared_drill,
    drill_fault,
    model_version,
    predictor,
    save_program,
    write_export,
)
from modelkit.loop import Recipe, main, train
from modelkit.metrics import Metrics

__all__ = ["ExportContext", "Metrics", "Recipe", "TrainError", "boxes_by_image", "check",
           "declared_drill", "drill_fault", "main", "model_version", "predictor", "run_main",
           "save_program", "train", "training_parser", "weights_digest", "write_export",
           "datasets", "synthetic"]
