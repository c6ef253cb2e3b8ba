"""Decode CenterNet-style heads into detections, in numpy.

A per-class heatmap [N, C, H, W], a size map and an offset map [N, 2, H, W] become
detections: heatmap cells that are the maximum of their `nms_kernel` neighbourhood,
among the `top_k` best, above `score_threshold` (`decode:` in infer_cfg.yml), returned
PaddleDetection-style (`bbox` [M, 6] rows of class id, score, x1, y1, x2, y2 in the
caller's pixels, `bbox_num` [N]). The example's decoder family
(`examples/shapes-detector/postprocess.py`), parameterised by the model's own config.
"""

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from serving.modeldir import DecodeConfig

ROLES = ("heatmap", "size", "offset")


def _max_pool_same(heat: np.ndarray, window: int) -> np.ndarray:
    """Max over a `window`x`window` neighbourhood, same spatial size (padding -inf)."""
    if window <= 1:
        return heat
    pad = window // 2
    padded = np.pad(
        heat, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="constant", constant_values=-np.inf
    )
    return sliding_window_view(padded, (window, window), axis=(2, 3)).max(axis=(-1, -2))


def decode_centernet(
    heatmap: np.ndarray,
    size: np.ndarray,
    offset: np.ndarray,
    cfg: DecodeConfig,
    input_hw: tuple[int, int],
    category_ids: list[int] | None = None,
    original_hw: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Heads -> (`bbox` [M, 6] float32, `bbox_num` [N] int32).

    `input_hw` is the network input size; boxes are clipped to it and then
    scaled to `original_hw` [N, 2] (height, width per image) when given.
    Column 0 is the category id of the heatmap channel (`category_ids`,
    default: the channel index).
    """
    heat: np.ndarray = heatmap.astype(np.float32, copy=False)
    if cfg.heatmap_activation == "sigmoid":
        heat = 1.0 / (1.0 + np.exp(-heat))
    peaks = np.where(_max_pool_same(heat, cfg.nms_kernel) == heat, heat, 0.0)
    batch, classes, height, width = heat.shape
    in_h, in_w = input_hw
    unit = 1.0 if cfg.size_unit == "pixels" else float(cfg.stride)
    ids = np.asarray(category_ids if category_ids else range(classes), dtype=np.float32)
    if len(ids) != classes:
        raise ValueError(f"{len(ids)} labels for a heatmap of {classes} classes")
    rows: list[np.ndarray] = []
    counts = np.zeros(batch, dtype=np.int32)
    for b in range(batch):
        flat = peaks[b].reshape(-1)
        k = min(cfg.top_k, flat.size)
        best = np.argpartition(-flat, k - 1)[:k]
        best = best[np.argsort(-flat[best], kind="stable")]
        best = best[flat[best] > cfg.score_threshold]
        cls, cell = np.divmod(best, height * width)
        ys, xs = np.divmod(cell, width)
        cx = (xs + offset[b, 0, ys, xs]) * cfg.stride
        cy = (ys + offset[b, 1, ys, xs]) * cfg.stride
        w = size[b, 0, ys, xs] * unit
        h = size[b, 1, ys, xs] * unit
        x1 = np.clip(cx - w / 2, 0, in_w)
        y1 = np.clip(cy - h / 2, 0, in_h)
        x2 = np.clip(cx + w / 2, 0, in_w)
        y2 = np.clip(cy + h / 2, 0, in_h)
        if original_hw is not None:
            sy, sx = original_hw[b, 0] / in_h, original_hw[b, 1] / in_w
            x1, x2, y1, y2 = x1 * sx, x2 * sx, y1 * sy, y2 * sy
        det = np.stack(
            [ids[cls], flat[best], x1, y1, x2, y2], axis=1
        )
        rows.append(det.astype(np.float32))
        counts[b] = len(best)
    bbox = np.concatenate(rows, axis=0) if rows else np.zeros((0, 6), np.float32)
    return bbox, counts


def label_names(bbox: np.ndarray, names: dict[int, str]) -> np.ndarray:
    """Class names for the rows of `bbox` (object array of bytes; the id if unnamed)."""
    out = np.empty(len(bbox), dtype=object)
    for i, class_id in enumerate(bbox[:, 0].astype(np.int64)):
        out[i] = names.get(int(class_id), str(int(class_id))).encode("utf-8")
    return out
