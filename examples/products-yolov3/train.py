"""Train, checkpoint, export: the product-shelf YOLOv3's one entrypoint (the pipeline's contract).

    python train.py --output-dir OUT --checkpoint-dir CKPT [--data-dir data] [--epochs N]
        [--batch-size B] [--lr LR] [--max-steps N] [--subset N] [--seed S] [--log-every N]
        [--drill-delay-ms MS] [--drill-error-rate R] [--drill-error-status 500|503]
        [--drill-skew none|no-scale|mean-std]
        [--weights-cache DIR] [--init-from MODEL_DIR]
    python -m paddle.distributed.launch --nproc_per_node 2 --log_dir LOGS train.py <same flags>

Environment (all optional): MLOPS_TRAINING_COMMIT, MLOPS_WORKFLOW_ID (lineage,
copied into model.yaml); MLOPS_METRICS_PORT (rank r serves Prometheus
``/metrics`` on port + r while it runs; 0 or unset: no server).

What is this model's own stays here: its data (``shelf_data.py``), the
batches and yolo_loss targets of one step, the net and its loss (``model.py``),
and its export in PaddleDetection's format. Flags, ranks, schedule,
checkpoints and resume, the weights cache, the training metrics and writing
the artifact are the project's model-repo kit, ``modelkit``
(``pip install paddle-mlops[kit]``), shared with every model repo.

* Rank 0 exports with ``paddle.jit.save`` to ``OUT/model/inference.{json,pdiparams}``
  in PaddleDetection's format (inputs ``image``, ``im_shape``, ``scale_factor``;
  ``yolo_box`` + ``multiclass_nms3`` in the graph; outputs ``bbox``, ``bbox_num``),
  writes PaddleDetection's ``infer_cfg.yml`` and ``model.yaml``, then runs the
  *exported* model with ``paddle.inference`` over the val set, preprocessed as
  ``infer_cfg.yml`` says (``preprocess.py``), into ``OUT/bbox.json`` (COCO detections).
* ``--drill-skew`` exports ``infer_cfg.yml`` with a serving-side
  mistake (NormalizeImage's ``is_scale`` off, so pixels are not divided by
  255, or its mean and std swapped): the training code's own ``bbox.json``
  does not show it; the pipeline's evaluate step runs the export as served,
  so the gate does. The other ``--drill-*`` flags, ``--weights-cache`` and
  ``--init-from`` are the kit's (modelkit/export.py, modelkit/weights_cache.py,
  modelkit/warmstart.py).
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

import shelf_data  # noqa: E402
from preprocess import create_inputs, preprocess  # noqa: E402

from modelkit import TrainError, boxes_by_image, drill_fault  # noqa: E402, F401 (tests')

MODEL_NAME = "products-yolov3"
EPOCHS = 16
LR = 3e-3
MEAN = [0.485, 0.456, 0.406]  # PaddleDetection's (ImageNet) normalisation
STD = [0.229, 0.224, 0.225]
SKEWS = ("none", "no-scale", "mean-std")


def parse_args(argv=None):
    p = modelkit.training_parser(
        "Train the product-shelf YOLOv3 detector.", epochs=EPOCHS, lr=LR, skews=SKEWS,
        generator="shelf_data.py",
        skew_help="no-scale turns NormalizeImage's is_scale off (0..255 pixels), mean-std "
        "swaps its mean and std")
    return modelkit.check(p.parse_args(argv))


def make_batch(images, boxes, idx, flips, ops, size):
    """Preprocessed NCHW batch (flipped where ``flips``) and yolo_loss's padded targets:
    gt_box [B, MAX_BOXES, 4] (cx, cy, w, h) / size, gt_label [B, MAX_BOXES] int32."""
    from model import MAX_BOXES

    batch = np.empty((len(idx), 3, size, size), np.float32)
    gt_box = np.zeros((len(idx), MAX_BOXES, 4), np.float32)
    gt_label = np.zeros((len(idx), MAX_BOXES), np.int32)
    for j, i in enumerate(idx):
        im, b = images[i], boxes[i][:MAX_BOXES].copy()
        if flips[j]:
            im = im[:, ::-1]
            b[:, 1] = size - b[:, 1] - b[:, 3]
        batch[j] = preprocess(np.ascontiguousarray(im), ops)[0]
        gt_label[j, :len(b)] = b[:, 0].astype(np.int32) - 1  # category id -> class index
        gt_box[j, :len(b)] = np.stack([b[:, 1] + b[:, 3] / 2, b[:, 2] + b[:, 4] / 2,
                                       b[:, 3], b[:, 4]], axis=1) / size
    return batch, gt_box, gt_label


def infer_cfg(categories, size):
    """PaddleDetection's ``infer_cfg.yml`` (``_dump_infer_config``) for this export."""
    return {
        "mode": "paddle",
        "draw_threshold": 0.5,
        "metric": "COCO",
        "use_dynamic_shape": False,
        "arch": "YOLO",
        "min_subgraph_size": 3,
        "Preprocess": [
            {"interp": 2, "keep_ratio": False, "target_size": [size, size], "type": "Resize"},
            {"is_scale": True, "mean": list(MEAN), "norm_type": "mean_std", "std": list(STD),
             "type": "NormalizeImage"},
            {"type": "Permute"},
        ],
        "label_list": [c["name"] for c in categories],
    }


def skewed_cfg(cfg, skew):
    """infer_cfg.yml with the --drill-skew mistake made on purpose."""
    mistakes = {"no-scale": lambda op: dict(op, is_scale=False),
                "mean-std": lambda op: dict(op, mean=op["std"], std=op["mean"])}
    if skew not in mistakes:
        return cfg
    ops = [mistakes[skew](op) if op["type"] == "NormalizeImage" else op
           for op in cfg["Preprocess"]]
    return dict(cfg, Preprocess=ops)


def run_exported(model_dir, images, ops, batch=50):
    """The exported program's detections through paddle.inference, as upstream's
    ``Detector.predict``: one (bbox [M, 6], bbox_num [N]) pair per batch, concatenated."""
    pred = modelkit.predictor(model_dir)
    names = pred.get_output_names()
    bboxes, nums = [], []
    for start in range(0, len(images), batch):
        feeds = create_inputs(list(images[start:start + batch]), ops)
        for name in pred.get_input_names():
            handle = pred.get_input_handle(name)
            handle.reshape(list(feeds[name].shape))
            handle.copy_from_cpu(feeds[name])
        pred.run()
        bboxes.append(pred.get_output_handle(names[0]).copy_to_cpu())
        nums.append(pred.get_output_handle(names[1]).copy_to_cpu())
    return np.concatenate(bboxes), np.concatenate(nums)


def coco_detections(bbox, bbox_num, entries, categories):
    """COCO result rows from the export's (class, score, x1, y1, x2, y2) rows."""
    out, start = [], 0
    for entry, count in zip(entries, bbox_num.tolist()):
        for cls, score, x1, y1, x2, y2 in bbox[start:start + count].tolist():
            out.append({"image_id": entry["id"], "category_id": categories[int(cls)]["id"],
                        "bbox": [round(x1, 3), round(y1, 3), round(x2 - x1, 3),
                                 round(y2 - y1, 3)],
                        "score": round(score, 5)})
        start += count
    return out


def load(args):
    """The data, the net and the loss of one step: this model's part of a run."""
    import paddle
    from model import INPUT_SIZE, YOLOv3Small, count_parameters, yolo_losses

    digest, images, coco, entries = modelkit.datasets.training_split(
        args.data_dir, args.subset, "shelf_data.py")
    boxes = boxes_by_image(coco, entries)
    categories = coco["categories"]
    ops = infer_cfg(categories, INPUT_SIZE)["Preprocess"]
    if images.shape[1:3] != (INPUT_SIZE, INPUT_SIZE):
        raise TrainError(f"training images are {images.shape[1:3]}, the net takes "
                         f"{INPUT_SIZE}x{INPUT_SIZE}")

    def step_loss(model, idx, flips):
        x, gt_box, gt_label = make_batch(images, boxes, idx, flips, ops, INPUT_SIZE)
        return yolo_losses(model(paddle.to_tensor(x)), paddle.to_tensor(gt_box),
                           paddle.to_tensor(gt_label), len(categories))[0]

    return modelkit.Recipe(make_net=lambda: YOLOv3Small(num_classes=len(categories)),
                           images=len(images), step_loss=step_loss,
                           count_parameters=count_parameters, dataset_digest=digest,
                           code_dir=HERE, export=lambda net, ctx: export(net, ctx, categories))


def export(net, ctx, categories):
    """jit.save net + yolo_box + NMS, write infer_cfg.yml + model.yaml, then bbox.json."""
    from model import INPUT_SIZE, YOLOv3Export
    from paddle.static import InputSpec

    wrapped = YOLOv3Export(net)
    wrapped.eval()
    model_dir = modelkit.save_program(wrapped, ctx, [
        InputSpec([None, 3, None, None], "float32", name="image"),
        InputSpec([None, 2], "float32", name="im_shape"),
        InputSpec([None, 2], "float32", name="scale_factor"),
    ])
    cfg = infer_cfg(categories, INPUT_SIZE)
    val_images, _val_coco, val_entries = shelf_data.load_split(ctx.args.data_dir, "val")
    bbox_rows, bbox_num = run_exported(model_dir, val_images, cfg["Preprocess"])
    fault, drill = modelkit.declared_drill(ctx.args)
    served_cfg = cfg if fault is None else dict(cfg, fault=fault)
    # bbox.json below still uses `cfg`; the served export does not
    served_cfg = skewed_cfg(served_cfg, ctx.args.drill_skew)
    modelkit.write_export(ctx, name=MODEL_NAME, served_cfg=served_cfg,
                 detections=coco_detections(bbox_rows, bbox_num, val_entries, categories),
                 postprocess="in the graph (yolo_box + multiclass_nms3), PaddleDetection's",
                 drill=drill)


def main(argv=None):
    return modelkit.main(parse_args, load, argv, shelf_data.DatasetError)


if __name__ == "__main__":
    sys.exit(main())
