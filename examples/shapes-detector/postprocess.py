"""Pre- and post-processing for the exported shapes detector, in pure numpy.

Why outside the graph: CenterNet's decode (3x3 max-pool "NMS", top-k, box
arithmetic) is a handful of numpy lines; keeping it here rather than in the
exported program keeps the graph to plain convolutions and lets the training
repo (``train.py`` writes ``bbox.json`` with it) and the serving layer decode
*exactly* the same way: both call ``decode``. Everything it needs is in
``infer_cfg.yml`` (written by ``train.py``), so this file depends on nothing
but numpy and may be copied verbatim into a server.

Exported graph (see ``infer_cfg.yml`` -> ``outputs``), for N input images:

    input  ``image``    float32 [N, 3, H, W], RGB, (pixel/255 - mean) / std, H = W = 128
    output ``heatmap``  float32 [N, C, H/s, W/s], per-class centre probability (sigmoid applied)
    output ``size``     float32 [N, 2, H/s, W/s], box (w, h) in output-grid cells
    output ``offset``   float32 [N, 2, H/s, W/s], sub-cell centre offset (dx, dy) in cells

with s = ``infer_cfg["decode"]["stride"]`` (8 for the shipped model: 16x16 grids).

A detection at grid cell (x, y) of class c has score heatmap[c, y, x],
centre ((x + dx) * stride, (y + dy) * stride) and size (w * stride, h * stride)
in input pixels.
"""

import numpy as np


def preprocess(images, infer_cfg):
    """uint8 RGB images [N, H, W, 3] (already at the input size) -> float32 [N, 3, H, W]."""
    arr = np.asarray(images)
    if arr.ndim == 3:
        arr = arr[None]
    size = infer_cfg["input"]["size"]
    if arr.ndim != 4 or arr.shape[1:] != (size[0], size[1], 3):
        raise ValueError(f"expected images of shape [N, {size[0]}, {size[1]}, 3], "
                         f"got {list(arr.shape)}")
    if infer_cfg["input"].get("channel_order", "RGB") == "BGR":
        arr = arr[..., ::-1]
    mean = np.asarray(infer_cfg["input"]["mean"], np.float32)
    std = np.asarray(infer_cfg["input"]["std"], np.float32)
    x = (arr.astype(np.float32) / 255.0 - mean) / std
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def _output(outputs, infer_cfg, role):
    """Find one head by its logical name, or by the exported tensor name the config records."""
    if role in outputs:
        return np.asarray(outputs[role])
    for spec in infer_cfg["outputs"]:
        if spec["name"] == role and spec.get("tensor") in outputs:
            return np.asarray(outputs[spec["tensor"]])
    raise KeyError(f"output {role!r} missing; got {sorted(outputs)}")


def _maxpool3(heat):
    """3x3 max-pool with stride 1 and -inf padding over the last two axes."""
    padded = np.pad(heat, [(0, 0)] * (heat.ndim - 2) + [(1, 1), (1, 1)],
                    constant_values=-np.inf)
    h, w = heat.shape[-2:]
    out = np.full_like(heat, -np.inf)
    for dy in range(3):
        for dx in range(3):
            np.maximum(out, padded[..., dy:dy + h, dx:dx + w], out=out)
    return out


def decode(outputs, infer_cfg, image_sizes=None):
    """Raw heads -> detections per image: [[{category_id, score, bbox: [x, y, w, h]}, ...], ...].

    ``outputs`` maps "heatmap"/"size"/"offset" (or the exported tensor names
    listed in ``infer_cfg["outputs"]``) to arrays with a batch axis.
    ``image_sizes`` (optional, [(height, width), ...]) rescales boxes from the
    network input size to each original image, when the caller resized it.
    Boxes are clipped to the image. Decode parameters come from
    ``infer_cfg["decode"]``: stride, top_k, score_threshold, nms_kernel (3).
    """
    params = infer_cfg["decode"]
    stride = float(params["stride"])
    top_k = int(params["top_k"])
    threshold = float(params["score_threshold"])
    category_ids = [int(c["id"]) for c in infer_cfg["labels"]]
    in_h, in_w = infer_cfg["input"]["size"]

    heat = _output(outputs, infer_cfg, "heatmap").astype(np.float32)
    size = _output(outputs, infer_cfg, "size").astype(np.float32)
    offset = _output(outputs, infer_cfg, "offset").astype(np.float32)
    n, c, h, w = heat.shape
    peaks = np.where(_maxpool3(heat) == heat, heat, 0.0).reshape(n, -1)
    k = min(top_k, peaks.shape[1])
    results = []
    for i in range(n):
        top = np.argpartition(-peaks[i], k - 1)[:k]
        top = top[np.argsort(-peaks[i][top], kind="stable")]
        top = top[peaks[i][top] > threshold]
        cls, rem = np.divmod(top, h * w)
        ys, xs = np.divmod(rem, w)
        bw = size[i, 0, ys, xs] * stride
        bh = size[i, 1, ys, xs] * stride
        cx = (xs + offset[i, 0, ys, xs]) * stride
        cy = (ys + offset[i, 1, ys, xs]) * stride
        x0 = np.clip(cx - bw / 2, 0, in_w)
        y0 = np.clip(cy - bh / 2, 0, in_h)
        x1 = np.clip(cx + bw / 2, 0, in_w)
        y1 = np.clip(cy + bh / 2, 0, in_h)
        sy, sx = 1.0, 1.0
        if image_sizes is not None:
            sy, sx = image_sizes[i][0] / in_h, image_sizes[i][1] / in_w
        dets = []
        for j in range(len(top)):
            dets.append({
                "category_id": category_ids[int(cls[j])],
                "score": round(float(peaks[i][top[j]]), 5),
                "bbox": [round(float(x0[j] * sx), 2), round(float(y0[j] * sy), 2),
                         round(float((x1[j] - x0[j]) * sx), 2),
                         round(float((y1[j] - y0[j]) * sy), 2)],
            })
        results.append(dets)
    return results
