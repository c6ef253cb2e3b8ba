"""PaddleDetection's deploy preprocessing, as this repo's ``infer_cfg.yml`` lists it.

Upstream: ``deploy/python/preprocess.py`` (``Resize``, ``NormalizeImage``,
``Permute``, ``PadStride``) and ``deploy/python/infer.py`` (``create_inputs``),
PaddleDetection release/2.7. ``train.py`` writes ``bbox.json`` with this code
and trains on the same arithmetic, so the gate's mAP is the mAP of what a
PaddleDetection-compatible server answers. Depends on numpy and OpenCV only.

For one RGB uint8 HWC image it returns the three inputs of the export:
``image`` float32 CHW, ``im_shape`` (height, width) after Resize and
``scale_factor`` (scale_y, scale_x) from the original image.
"""

import numpy as np


def resize(im, op):
    """``Resize``: to ``target_size`` (h, w), or keeping the aspect ratio within it."""
    # lazy: optional, opencv
    import cv2

    h, w = im.shape[:2]
    target = op["target_size"]
    target = [target, target] if isinstance(target, int) else target
    if op.get("keep_ratio", True):
        size_min, size_max = min(h, w), max(h, w)
        scale = float(min(target)) / float(size_min)
        if np.round(scale * size_max) > max(target):
            scale = float(max(target)) / float(size_max)
        sy = sx = scale
    else:
        sy, sx = target[0] / float(h), target[1] / float(w)
    im = cv2.resize(im, None, None, fx=sx, fy=sy, interpolation=op.get("interp", 1))
    return im, sy, sx


def normalize(im, op):
    """``NormalizeImage``: float32, /255 when ``is_scale``, then (x - mean) / std."""
    im = im.astype(np.float32, copy=False)
    if op.get("is_scale", True):
        im *= 1.0 / 255.0
    if op.get("norm_type", "mean_std") == "mean_std":
        mean = np.array(op["mean"])[np.newaxis, np.newaxis, :]
        std = np.array(op["std"])[np.newaxis, np.newaxis, :]
        im -= mean
        im /= std
    return im


def pad_stride(im, stride):
    """``PadStride``: zero-pad a CHW image up to multiples of ``stride``."""
    if stride <= 0:
        return im
    c, h, w = im.shape
    ph, pw = int(np.ceil(h / stride) * stride), int(np.ceil(w / stride) * stride)
    out = np.zeros((c, ph, pw), np.float32)
    out[:, :h, :w] = im
    return out


def preprocess(im, ops):
    """RGB uint8 HWC -> (image float32 CHW, im_shape float32 [2], scale_factor float32 [2])."""
    im_shape = np.array(im.shape[:2], np.float32)
    scale = np.array([1.0, 1.0], np.float32)
    for op in ops:
        kind = op["type"]
        if kind == "Resize":
            im, sy, sx = resize(im, op)
            im_shape = np.array(im.shape[:2], np.float32)
            scale = np.array([sy, sx], np.float32)
        elif kind == "NormalizeImage":
            im = normalize(im, op)
        elif kind == "Permute":
            im = im.transpose((2, 0, 1)).copy()
        elif kind == "PadStride":
            im = pad_stride(im, op.get("stride", 0))
        else:
            raise ValueError(f"unsupported preprocess op {kind!r}")
    return im.astype(np.float32, copy=False), im_shape, scale


def create_inputs(images, ops):
    """A batch as upstream's ``create_inputs``: images zero-padded to the largest."""
    done = [preprocess(im, ops) for im in images]
    c = done[0][0].shape[0]
    h = max(d[0].shape[1] for d in done)
    w = max(d[0].shape[2] for d in done)
    batch = np.zeros((len(done), c, h, w), np.float32)
    for i, (x, _, _) in enumerate(done):
        batch[i, :, :x.shape[1], :x.shape[2]] = x
    return {"image": batch,
            "im_shape": np.stack([d[1] for d in done]).astype(np.float32),
            "scale_factor": np.stack([d[2] for d in done]).astype(np.float32)}
