"""A small anchor-free CenterNet-style detector in ``paddle.nn`` (~0.38 M parameters).

Why CenterNet: no anchors and no NMS inside the network, so the exported graph
is plain convolutions (fast on one CPU thread, trivially exportable) and the
whole decode is a few lines of numpy in ``postprocess.py`` that the serving
layer runs identically.

Shape of the net for a 128x128 input (heads at stride 8, a 16x16 grid)::

    stem   3x3/2   3 -> 16     64x64
    c2     3x3/2  16 -> 32     32x32
    c3     3x3/2  32 -> 64     16x16   (skip)
    c4     3x3/2  64 -> 128     8x8
    neck   upsample c4 x2 + lateral 1x1 of c3, 3x3 fuse   -> 64 channels at 16x16
    trunk  3x3 64 -> 64, then 1x1 heads: heatmap (sigmoid, one map per class),
           size (w, h in grid cells), offset (dx, dy in cells)

Outputs, in this order (the order ``paddle.jit.save`` exports them):
``heatmap`` [N, C, 16, 16] in (0, 1); ``size`` [N, 2, 16, 16]; ``offset`` [N, 2, 16, 16].

Why stride 8 and not CenterNet's 4: measured on this data, the stride-8 net
(width 64) reached mAP@0.5 0.57 after 150 steps where the stride-4 net (width
48) had 0.35, and it costs less per image: the stride-4 level was most of the
compute. Objects are 14-44 px and rarely share a centre cell, and the offset
head restores sub-cell precision. ``stride=4`` is still available.

BatchNorm keeps the net fast to train. Its running statistics are
non-trainable parameters, which ``DataParallel`` does not all-reduce, so
``train.py`` averages them across ranks before every checkpoint and before
export (ranks end identical).

The training targets and loss live here too, next to the heads they belong to:
a penalty-reduced focal loss on the heatmap (CenterNet), L1 on size and
offset at object centres.
"""

import math

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

STRIDE = 8
OUTPUT_NAMES = ("heatmap", "size", "offset")


def conv_bn(cin, cout, stride=1, kernel=3):
    """Conv + BatchNorm + ReLU, the one building block."""
    return nn.Sequential(
        nn.Conv2D(cin, cout, kernel, stride=stride, padding=kernel // 2, bias_attr=False),
        nn.BatchNorm2D(cout),
        nn.ReLU(),
    )


def upsample2(x):
    """Nearest-neighbour x2 upsampling as reshape/tile.

    ``F.interpolate(scale_factor=2)`` exports a double-array attribute that
    Paddle Inference's oneDNN executor cannot run (Paddle 3.3); this form is
    plain reshapes, runs everywhere, and has the same gradient.
    """
    n, c, h, w = x.shape
    x = paddle.tile(x.unsqueeze([3, 5]), [1, 1, 1, 2, 1, 2])
    return x.reshape([-1, c, h * 2, w * 2])


class ShapesNet(nn.Layer):
    """Backbone + 2-level upsampling neck + three CenterNet heads."""

    def __init__(self, num_classes=3, width=64, stride=STRIDE):
        super().__init__()
        if stride not in (4, 8):
            raise ValueError(f"stride must be 4 or 8, got {stride}")
        self.stride = stride
        self.stem = conv_bn(3, 16, stride=2)
        self.c2 = nn.Sequential(conv_bn(16, 32, stride=2), conv_bn(32, 32))
        self.c3 = nn.Sequential(conv_bn(32, 64, stride=2), conv_bn(64, 64))
        self.c4 = nn.Sequential(conv_bn(64, 128, stride=2), conv_bn(128, 128))
        self.lat4 = conv_bn(128, 64, kernel=1)
        self.lat3 = conv_bn(64, 64, kernel=1)
        self.fuse3 = conv_bn(64, 64)
        if stride == 4:
            self.lat2 = conv_bn(32, width, kernel=1)
            self.top3 = conv_bn(64, width, kernel=1)
            self.fuse2 = conv_bn(width, width)
            self.trunk = conv_bn(width, width)
        else:
            self.trunk = conv_bn(64, width)
        self.heatmap = nn.Conv2D(width, num_classes, 1,
                                 bias_attr=nn.initializer.Constant(-math.log((1 - 0.1) / 0.1)))
        self.size = nn.Conv2D(width, 2, 1)
        self.offset = nn.Conv2D(width, 2, 1)

    def forward(self, image):
        x = self.stem(image)
        f2 = self.c2(x)
        f3 = self.c3(f2)
        f4 = self.c4(f3)
        p = self.fuse3(upsample2(self.lat4(f4)) + self.lat3(f3))
        if self.stride == 4:
            p = self.fuse2(upsample2(self.top3(p)) + self.lat2(f2))
        t = self.trunk(p)
        return F.sigmoid(self.heatmap(t)), self.size(t), self.offset(t)


def build_targets(boxes_per_image, num_classes, out_size, stride=STRIDE):
    """Numpy targets for one batch.

    ``boxes_per_image``: list (per image) of arrays [[category_id, x, y, w, h], ...]
    in input pixels. Returns heatmap [N,C,H,W] (elliptical gaussians peaking at 1
    on each centre cell, TTFNet-style sigma = 0.54*side/6), plus size/offset
    targets [N,2,H,W] and a mask [N,1,H,W] that is 1 on centre cells.
    """
    n = len(boxes_per_image)
    heat = np.zeros((n, num_classes, out_size, out_size), np.float32)
    size = np.zeros((n, 2, out_size, out_size), np.float32)
    offset = np.zeros((n, 2, out_size, out_size), np.float32)
    mask = np.zeros((n, 1, out_size, out_size), np.float32)
    grid = np.arange(out_size, dtype=np.float32)
    for i, boxes in enumerate(boxes_per_image):
        for cat, x, y, w, h in boxes:
            cx, cy = (x + w / 2) / stride, (y + h / 2) / stride
            ix = min(int(cx), out_size - 1)
            iy = min(int(cy), out_size - 1)
            sx = max(0.54 * w / stride / 6, 0.4)
            sy = max(0.54 * h / stride / 6, 0.4)
            g = np.exp(-((grid[None, :] - ix) ** 2) / (2 * sx * sx)
                       - ((grid[:, None] - iy) ** 2) / (2 * sy * sy))
            c = int(cat) - 1
            np.maximum(heat[i, c], g, out=heat[i, c])
            heat[i, c, iy, ix] = 1.0
            size[i, :, iy, ix] = (w / stride, h / stride)
            offset[i, :, iy, ix] = (cx - ix, cy - iy)
            mask[i, 0, iy, ix] = 1.0
    return heat, size, offset, mask


def detection_loss(outputs, targets, size_weight=0.1):
    """CenterNet loss: focal(heatmap) + 0.1 * L1(size) + L1(offset), per object.

    Returns (total, dict of parts as floats-to-be). ``targets`` are paddle
    tensors in the order of ``build_targets``.
    """
    heat_p, size_p, off_p = outputs
    heat_t, size_t, off_t, mask = targets
    heat_p = paddle.clip(heat_p, 1e-4, 1 - 1e-4)
    pos = paddle.cast(heat_t == 1.0, "float32")
    neg_weight = paddle.pow(1 - heat_t, 4)
    pos_loss = paddle.log(heat_p) * paddle.pow(1 - heat_p, 2) * pos
    neg_loss = paddle.log(1 - heat_p) * paddle.pow(heat_p, 2) * neg_weight * (1 - pos)
    num = paddle.clip(mask.sum(), min=1.0)
    focal = -(pos_loss.sum() + neg_loss.sum()) / num
    size_l = (paddle.abs(size_p - size_t) * mask).sum() / num
    off_l = (paddle.abs(off_p - off_t) * mask).sum() / num
    total = focal + size_weight * size_l + off_l
    return total, {"heatmap": focal, "size": size_l, "offset": off_l}


def count_parameters(model):
    return int(sum(int(np.prod(p.shape)) for p in model.parameters()))
