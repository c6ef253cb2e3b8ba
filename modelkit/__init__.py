"""The model-repo kit: what a team's `train.py` imports so it keeps only its model, loss and data.

The pipeline's contract with a model repo (`mlops.yaml`, the flags the
pipeline appends, the log lines the demo reads, the artifact of
contracts/artifact.py) is the same for every model; this package is that
contract written once. A `train.py` builds its parser with
:func:`modelkit.argv.training_parser`, hands :func:`modelkit.loop.train` a
:class:`modelkit.loop.Recipe` (net factory, per-step loss, export) and runs
under :func:`modelkit.errors.run_main`; the loop does the rest:

    argv.py           the common flags (--output-dir, --checkpoint-dir, --epochs, --drill-*...)
    loop.py           ranks, optimiser, schedule, sample order, logging, the run itself
    checkpoints.py    atomic checkpoints, resume, the weights digest
    weights_cache.py  reuse a finished run's weights for the same inputs
    metrics.py        Prometheus /metrics of each rank (MLOPS_METRICS_PORT + rank)
    coco.py           COCO annotations as per-image box arrays
    export.py         the exported program, infer_cfg.yml, model.yaml, bbox.json
    files.py          atomic writes
    errors.py         TrainError and the one-line error exit

It imports only `contracts` and third-party libraries (PaddlePaddle, numpy,
PyYAML, prometheus-client), so a training image needs the distribution's
base dependencies plus PaddlePaddle (`pip install paddle-mlops[kit]`) and
nothing of the pipeline. PaddlePaddle is imported inside the functions that
use it: importing the kit (and a `train.py` for its pure helpers) stays cheap.
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
