"""Build a PaddleDetection-format export without downloading anything.

`build_ppdet_export(model_dir)` writes what PaddleDetection's
`tools/export_model.py` writes for a YOLOv3 (`ppdet/engine/export_utils.py`
`_dump_infer_config`, release/2.7), from a tiny random network:

* `inference.json` + `inference.pdiparams`: a `paddle.jit.save` export with
  PaddleDetection's three inputs `image` [-1, 3, -1, -1], `im_shape` [-1, 2]
  and `scale_factor` [-1, 2] (float32), and its two outputs: `bbox` [M, 6]
  rows of (class, score, x1, y1, x2, y2) in original-image pixels and
  `bbox_num` [N] (int32). Like PaddleDetection's `YOLOBox`
  (`ppdet/modeling/layers.py`) the graph decodes with
  `paddle.vision.ops.yolo_box` on the original size `im_shape / scale_factor`,
  then runs `multiclass_nms3` (`ppdet/modeling/ops.py` `multiclass_nms`) in the
  graph, so a wrong `im_shape` or `scale_factor` moves the boxes;
* `infer_cfg.yml` in PaddleDetection's shape (`mode`, `draw_threshold`,
  `metric`, `use_dynamic_shape`, `arch`, `min_subgraph_size`, `Preprocess`,
  `label_list`);
* `model.yaml` with the weights' real sha256 (`contracts.artifact`).

The network is three stride-2 convolutions and a YOLO head with two anchors
and three classes, seeded, its head calmed and its NMS score threshold set so
an image yields a number of boxes that depends on its content (a flat grey
image none). The export runs in a
subprocess (`paddle.jit.save` reads `forward`'s source from a file, and the
test process stays free of dygraph state); it takes a few seconds.
"""

import os
import pathlib
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]

LABELS = ["circle", "square", "triangle"]
STRIDE = 8
ANCHORS = [10, 14, 23, 27]  # two anchors (w, h) in input pixels
# Tuned so that images with some structure get 5-20 boxes and a flat grey one none.
OBJECTNESS_BIAS = 0.0  # added to the head's objectness logits
HEAD_SCALE = 0.3  # the head's random weights, scaled (unscaled they saturate the sigmoids)
SCORE_THRESHOLD = 0.6  # multiclass_nms: the least score kept

_EXPORT = r'''
import sys

import paddle
import paddle.nn as nn
import paddle.nn.functional as F

CLASSES, STRIDE = int(sys.argv[2]), int(sys.argv[4])
ANCHORS = [int(a) for a in sys.argv[3].split(",")]
SCORE_THRESHOLD = float(sys.argv[7])
NUM_ANCHORS = len(ANCHORS) // 2


class TinyYolo(nn.Layer):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2D(3, 8, 3, stride=2, padding=1)
        self.c2 = nn.Conv2D(8, 16, 3, stride=2, padding=1)
        self.c3 = nn.Conv2D(16, 16, 3, stride=2, padding=1)
        self.head = nn.Conv2D(16, NUM_ANCHORS * (5 + CLASSES), 1)

    def forward(self, image, im_shape, scale_factor):
        y = F.relu(self.c3(F.relu(self.c2(F.relu(self.c1(image))))))
        head = self.head(y)
        # ppdet/modeling/layers.py YOLOBox: decode on the original image size
        origin_shape = paddle.cast(im_shape / scale_factor, "int32")
        boxes, scores = paddle.vision.ops.yolo_box(
            head, origin_shape, ANCHORS, CLASSES, 0.01, STRIDE, clip_bbox=True)
        scores = paddle.transpose(scores, perm=[0, 2, 1])
        # ppdet/modeling/ops.py multiclass_nms (PIR branch):
        # (score_threshold, nms_top_k, keep_top_k, nms_threshold, normalized, nms_eta,
        #  background_label)
        bbox, _, bbox_num = paddle._C_ops.multiclass_nms3(
            boxes, scores, None, SCORE_THRESHOLD, 100, 20, 0.45, False, 1.0, -1)
        return bbox, bbox_num


paddle.seed(11)
net = TinyYolo()
with paddle.no_grad():
    # a calm head (random weights saturate the sigmoids), its objectness shifted
    net.head.weight.set_value(net.head.weight.numpy() * float(sys.argv[6]))
    bias = net.head.bias.numpy()
    for a in range(NUM_ANCHORS):
        bias[a * (5 + CLASSES) + 4] += float(sys.argv[5])
    net.head.bias.set_value(bias)
net.eval()
paddle.jit.save(net, sys.argv[1], input_spec=[
    paddle.static.InputSpec([None, 3, None, None], "float32", name="image"),
    paddle.static.InputSpec([None, 2], "float32", name="im_shape"),
    paddle.static.InputSpec([None, 2], "float32", name="scale_factor"),
])
'''


def infer_cfg(target_size=(96, 128), keep_ratio=False, interp=2, stride=32,
              mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
              draw_threshold=0.5) -> dict:
    """PaddleDetection's `infer_cfg.yml` for the export, as `_dump_infer_config` writes it."""
    return {
        "mode": "paddle",
        "draw_threshold": draw_threshold,
        "metric": "COCO",
        "use_dynamic_shape": False,
        "arch": "YOLO",
        "min_subgraph_size": 3,
        "Preprocess": [
            {"interp": interp, "keep_ratio": keep_ratio, "target_size": list(target_size),
             "type": "Resize"},
            {"is_scale": True, "mean": list(mean), "norm_type": "mean_std", "std": list(std),
             "type": "NormalizeImage"},
            {"type": "Permute"},
            {"stride": stride, "type": "PadStride"},
        ],
        "label_list": list(LABELS),
    }


def export_env() -> dict:
    """A quiet, single-threaded Paddle for the export subprocess."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")}
    env.update(OMP_NUM_THREADS="1", GLOG_minloglevel="2")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def build_ppdet_export(model_dir, *, cfg: dict | None = None, name="tiny-yolo", version="p1",
                       objectness_bias=OBJECTNESS_BIAS, head_scale=HEAD_SCALE,
                       score_threshold=SCORE_THRESHOLD) -> pathlib.Path:
    """Write a PaddleDetection-format model directory at `model_dir` (`cfg`: its
    `infer_cfg.yml`, default `infer_cfg()`); returns it."""
    from contracts.artifact import PARAMS_FILE, sha256_file

    model_dir = pathlib.Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    script = model_dir.parent / f"{model_dir.name}-export.py"  # a file: jit.save reads source
    script.write_text(_EXPORT)
    args = [str(model_dir / "inference"), str(len(LABELS)), ",".join(map(str, ANCHORS)),
            str(STRIDE), str(objectness_bias), str(head_scale), str(score_threshold)]
    subprocess.run([sys.executable, str(script), *args], check=True, capture_output=True,
                   env=export_env(), timeout=300)
    (model_dir / "infer_cfg.yml").write_text(yaml.safe_dump(cfg or infer_cfg()))
    (model_dir / "model.yaml").write_text(yaml.safe_dump({
        "name": name, "version": version,
        "weights_sha256": sha256_file(model_dir / PARAMS_FILE),
    }))
    return model_dir
