"""Train, checkpoint, export: the shapes detector's one entrypoint (the pipeline's contract).

    python train.py --output-dir OUT --checkpoint-dir CKPT [--data-dir data] [--epochs N]
        [--batch-size B] [--lr LR] [--max-steps N] [--subset N] [--seed S] [--log-every N]
        [--drill-delay-ms MS] [--drill-error-rate R] [--drill-error-status 500|503]
        [--drill-skew none|no-scale|mean-std|bgr]
        [--weights-cache DIR] [--init-from MODEL_DIR]
    python -m paddle.distributed.launch --nproc_per_node 2 --log_dir LOGS train.py <same flags>

Environment (all optional): MLOPS_TRAINING_COMMIT, MLOPS_WORKFLOW_ID (lineage,
copied into model.yaml); MLOPS_METRICS_PORT (rank r serves Prometheus
``/metrics`` on port + r while it runs; 0 or unset: no server).

This file holds what is this model's own: its data (``shapes_data.py``), the
batches and targets of one step, the loss (``model.py``), and what its export
says (``infer_cfg.yml``: input, outputs, labels, the ``postprocess.decode``
settings). The rest (flags, ranks, schedule, checkpoints and resume, the
weights cache, the training metrics, writing the artifact) is the project's
model-repo kit, ``modelkit`` (``pip install paddle-mlops[kit]``), the same for
every model repo; its modules' docstrings say how each part works.

* Rank 0 exports with ``paddle.jit.save`` to ``OUT/model/inference.{json,pdiparams}``,
  writes ``infer_cfg.yml`` and ``model.yaml``, then runs the *exported* model
  with ``paddle.inference`` + ``postprocess.decode`` over the val set into
  ``OUT/bbox.json`` (COCO detections).
* ``--drill-skew`` exports ``infer_cfg.yml`` with a serving-side
  mistake (pixels not divided by 255, mean and std swapped, or the channel
  order): the training code's own ``bbox.json`` does not show it; the
  pipeline's evaluate step runs the export as served, so the gate does. The
  other ``--drill-*`` flags, ``--weights-cache`` and ``--init-from`` are the
  kit's (modelkit/export.py, modelkit/weights_cache.py, modelkit/warmstart.py).
"""

import os
import pathlib
import sys

# One thread per rank: Paddle 3 on CPU trains about 2x slower with two threads per process
# than with one when two processes share two cores. Must happen before paddle/numpy import.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import modelkit  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # this repo's modules, also when imported from elsewhere

import shapes_data  # noqa: E402
from postprocess import decode, preprocess  # noqa: E402

# The kit's, reached through this module by the tests (train.Metrics...)
from modelkit import Metrics, TrainError, drill_fault, model_version, weights_digest  # noqa

MODEL_NAME = "shapes-detector"
MEAN = [0.5, 0.5, 0.5]
STD = [0.25, 0.25, 0.25]
DECODE = {"stride": 8, "top_k": 40, "score_threshold": 0.02, "nms_kernel": 3}
SKEWS = ("none", "no-scale", "mean-std", "bgr")


def parse_args(argv=None):
    p = modelkit.training_parser(
        "Train the synthetic-shapes CenterNet detector.", epochs=7, lr=8e-3, skews=SKEWS,
        generator="shapes_data.py",
        skew_help="no-scale feeds 0..255 pixels (scale 1 instead of 1/255), mean-std swaps "
        "the normalisation's mean and std, bgr the channel order")
    return modelkit.check(p.parse_args(argv))


def make_batch(images, boxes, idx, flips, cfg):
    """Normalised NCHW batch + per-image boxes, horizontally flipped where ``flips``."""
    batch = images[idx].copy()
    out_boxes = []
    width = images.shape[2]
    for j, i in enumerate(idx):
        b = boxes[i].copy()
        if flips[j]:
            batch[j] = batch[j, :, ::-1]
            b[:, 1] = width - b[:, 1] - b[:, 3]
        out_boxes.append(b)
    return preprocess(batch, cfg), out_boxes


def infer_cfg(output_names, categories, stride=8):
    """The serving-side description of the export (written as infer_cfg.yml)."""
    meanings = {
        "heatmap": "per-class centre probability, sigmoid applied, [N, C, H/s, W/s]",
        "size": "box width, height in output-grid cells (x stride = pixels), [N, 2, H/s, W/s]",
        "offset": "sub-cell centre offset dx, dy in cells, [N, 2, H/s, W/s] (s = stride)",
    }
    return {
        "model": MODEL_NAME,
        "architecture": f"CenterNet-style, anchor-free, stride {stride}",
        "input": {"name": "image", "shape": [-1, 3, 128, 128], "dtype": "float32",
                  "size": [128, 128], "layout": "NCHW", "channel_order": "RGB",
                  "scale": "1/255", "mean": MEAN, "std": STD,
                  "formula": "(pixel / 255 - mean) / std"},
        "outputs": [{"name": role, "tensor": tensor, "meaning": meanings[role],
                     "shape": [-1, len(categories) if role == "heatmap" else 2,
                               128 // stride, 128 // stride]}
                    for role, tensor in zip(("heatmap", "size", "offset"), output_names)],
        "labels": [{"index": i, "id": c["id"], "name": c["name"]}
                   for i, c in enumerate(categories)],
        "decode": dict(DECODE, stride=stride,
                       postprocess="postprocess.decode (numpy): 3x3 max-pool peaks, "
                       "top_k, score > score_threshold; bbox = [(x+dx-w/2)*stride, "
                       "(y+dy-h/2)*stride, w*stride, h*stride]"),
    }


def skewed_input(section, skew):
    """infer_cfg.yml's ``input:`` with the --drill-skew mistake made on purpose."""
    if skew == "no-scale":
        return dict(section, scale=1.0)
    if skew == "mean-std":
        return dict(section, mean=section["std"], std=section["mean"])
    if skew == "bgr":
        return dict(section, channel_order="BGR" if section["channel_order"] == "RGB" else "RGB")
    return section


def run_exported(model_dir, images, cfg_without_names, batch=50):
    """Predict with the exported files through paddle.inference; returns (names, outputs list)."""
    pred = modelkit.predictor(model_dir)
    in_handle = pred.get_input_handle(pred.get_input_names()[0])
    names = pred.get_output_names()
    collected = {n: [] for n in names}
    for start in range(0, len(images), batch):
        x = preprocess(images[start:start + batch], cfg_without_names)
        in_handle.reshape(list(x.shape))
        in_handle.copy_from_cpu(x)
        pred.run()
        for n in names:
            collected[n].append(pred.get_output_handle(n).copy_to_cpu())
    return names, {n: np.concatenate(v) for n, v in collected.items()}


def load(args):
    """The data, the net and the loss of one step: this model's part of a run."""
    import paddle
    from model import STRIDE, ShapesNet, build_targets, count_parameters, detection_loss

    digest, images, coco, entries = modelkit.datasets.training_split(
        args.data_dir, args.subset, "shapes_data.py")
    boxes = modelkit.boxes_by_image(coco, entries)
    categories = coco["categories"]
    cfg = infer_cfg(["?"] * 3, categories)

    def step_loss(model, idx, flips):
        x, bxs = make_batch(images, boxes, idx, flips, cfg)
        out_size = images.shape[1] // STRIDE  # here: a run of no step opens no image
        targets = [paddle.to_tensor(t) for t in build_targets(bxs, len(categories), out_size,
                                                             STRIDE)]
        return detection_loss(model(paddle.to_tensor(x)), targets)[0]

    return modelkit.Recipe(make_net=lambda: ShapesNet(num_classes=len(categories)),
                           images=len(images), step_loss=step_loss,
                           count_parameters=count_parameters, dataset_digest=digest,
                           code_dir=HERE, export=lambda net, ctx: export(net, ctx, categories))


def export(net, ctx, categories):
    """jit.save the net, write infer_cfg.yml + model.yaml, then bbox.json via the export."""
    from paddle.static import InputSpec

    model_dir = modelkit.save_program(net, ctx,
                                      [InputSpec([None, 3, 128, 128], "float32", name="image")])
    val_images, _val_coco, val_entries = shapes_data.load_split(ctx.args.data_dir, "val")
    names, raw = run_exported(model_dir, val_images, infer_cfg(["?"] * 3, categories))
    cfg = infer_cfg(names, categories, net.stride)
    fault, drill = modelkit.declared_drill(ctx.args)
    served_cfg = cfg if fault is None else dict(cfg, fault=fault)
    if ctx.args.drill_skew != "none":  # bbox.json below uses `cfg`; the served export not
        served_cfg = dict(served_cfg, input=skewed_input(cfg["input"], ctx.args.drill_skew))
    bbox = [dict(image_id=entry["id"], **det)
            for entry, dets in zip(val_entries, decode(raw, cfg)) for det in dets]
    modelkit.write_export(ctx, name=MODEL_NAME, served_cfg=served_cfg, detections=bbox,
                 postprocess="postprocess.decode", drill=drill)


def main(argv=None):
    return modelkit.main(parse_args, load, argv, shapes_data.DatasetError)


if __name__ == "__main__":
    sys.exit(main())
