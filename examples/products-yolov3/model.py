"""A small YOLOv3: darknet-like backbone, a two-scale FPN neck, YOLO heads at strides 8 and 16.

Training uses ``paddle.vision.ops.yolo_loss`` on each head (as PaddleDetection's
``YOLOv3Loss`` does per output level). The export wraps the net in
``YOLOv3Export``, which does what PaddleDetection's exported YOLOv3 graph
does: ``yolo_box`` per level on the original image size (``im_shape /
scale_factor``), the levels concatenated, then ``multiclass_nms3``; its
inputs are ``image``, ``im_shape``, ``scale_factor`` and its outputs ``bbox``
[M, 6] rows of (class, score, x1, y1, x2, y2) in original-image pixels and
``bbox_num`` [N].
"""

import paddle
import paddle.nn as nn

INPUT_SIZE = 160
# (w, h) in input pixels, chosen for the generated products (k-means on the train boxes,
# spread over both levels): the small ones for stride 8, the large ones for stride 16.
ANCHORS = [[10, 20], [14, 36], [24, 26], [26, 48], [44, 66], [76, 110]]
ANCHOR_MASKS = [[0, 1, 2], [3, 4, 5]]  # per output, in output order
STRIDES = [8, 16]
MAX_BOXES = 40  # ground-truth boxes per image fed to yolo_loss (padded with zeros)
NMS = {"score_threshold": 0.01, "nms_top_k": 1000, "keep_top_k": 100, "nms_threshold": 0.45}
CONF_THRESHOLD = 0.005  # yolo_box: boxes below this objectness score are zeroed


class ConvBN(nn.Layer):
    def __init__(self, cin, cout, k=3, stride=1):
        super().__init__()
        self.conv = nn.Conv2D(cin, cout, k, stride=stride, padding=k // 2, bias_attr=False)
        self.bn = nn.BatchNorm2D(cout)

    def forward(self, x):
        # leaky ReLU (0.1) written as a maximum: Paddle 3.3's oneDNN pass fusing conv +
        # leaky_relu crashes the inference predictor (SIGSEGV reading the alpha attribute)
        y = self.bn(self.conv(x))
        return paddle.maximum(y, 0.1 * y)


class Residual(nn.Layer):
    """Darknet's basic block: 1x1 halves the channels, 3x3 restores them, plus the input."""

    def __init__(self, ch):
        super().__init__()
        self.a = ConvBN(ch, ch // 2, 1)
        self.b = ConvBN(ch // 2, ch, 3)

    def forward(self, x):
        return x + self.b(self.a(x))


class YOLOv3Small(nn.Layer):
    def __init__(self, num_classes, widths=(8, 16, 32, 64, 128)):
        super().__init__()
        self.num_classes = num_classes
        w1, w2, w3, w4, w5 = widths
        self.stem = nn.Sequential(ConvBN(3, w1, 3, 2), ConvBN(w1, w2, 3, 2), Residual(w2))
        self.c3 = nn.Sequential(ConvBN(w2, w3, 3, 2), Residual(w3), Residual(w3))  # stride 8
        self.c4 = nn.Sequential(ConvBN(w3, w4, 3, 2), Residual(w4), Residual(w4))  # stride 16
        self.c5 = nn.Sequential(ConvBN(w4, w5, 3, 2), Residual(w5))  # stride 32
        out = 3 * (5 + num_classes)
        self.lat5 = ConvBN(w5, w4, 1)
        self.neck16 = nn.Sequential(ConvBN(w4 * 2, w4, 1), ConvBN(w4, w4, 3), ConvBN(w4, w4, 1))
        self.head16 = nn.Sequential(ConvBN(w4, w4 * 2, 3), nn.Conv2D(w4 * 2, out, 1))
        self.lat16 = ConvBN(w4, w3, 1)
        self.neck8 = nn.Sequential(ConvBN(w3 * 2, w3, 1), ConvBN(w3, w3, 3), ConvBN(w3, w3, 1))
        self.head8 = nn.Sequential(ConvBN(w3, w3 * 2, 3), nn.Conv2D(w3 * 2, out, 1))

    def forward(self, x):
        """Raw head outputs [N, 3*(5+C), H/8, W/8] and [N, 3*(5+C), H/16, W/16]."""
        c3 = self.c3(self.stem(x))
        c4 = self.c4(c3)
        c5 = self.c5(c4)
        p16 = self.neck16(paddle.concat([upsample2(self.lat5(c5)), c4], 1))
        p8 = self.neck8(paddle.concat([upsample2(self.lat16(p16)), c3], 1))
        return [self.head8(p8), self.head16(p16)]


def upsample2(x):
    """Nearest-neighbour 2x upsampling as two repeat_interleave: F.interpolate's float
    ``scale`` attribute is not supported by Paddle 3.3's oneDNN inference executor."""
    return paddle.repeat_interleave(paddle.repeat_interleave(x, 2, axis=2), 2, axis=3)


def count_parameters(net):
    return int(sum(p.size for p in net.parameters() if not p.stop_gradient))


def flat_anchors():
    return [v for wh in ANCHORS for v in wh]


def yolo_losses(outputs, gt_box, gt_label, num_classes):
    """Mean over the batch of the summed per-level ``yolo_loss``; also each level's mean.

    ``gt_box`` [N, B, 4] float32 (cx, cy, w, h) divided by the input size, zero rows
    padding; ``gt_label`` [N, B] int32.
    """
    parts = []
    for out, mask, stride in zip(outputs, ANCHOR_MASKS, STRIDES):
        loss = paddle.vision.ops.yolo_loss(
            out, gt_box, gt_label, anchors=flat_anchors(), anchor_mask=mask,
            class_num=num_classes, ignore_thresh=0.7, downsample_ratio=stride,
            use_label_smooth=False, scale_x_y=1.0)
        parts.append(loss.mean())
    return parts[0] + parts[1], parts


class YOLOv3Export(nn.Layer):
    """The trained net plus PaddleDetection's post-processing, for ``paddle.jit.save``."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, image, im_shape, scale_factor):
        outputs = self.net(image)
        # ppdet/modeling/layers.py YOLOBox: decode on the original image size
        origin_shape = paddle.cast(paddle.floor(im_shape / scale_factor + 0.5), "int32")
        boxes, scores = [], []
        for out, mask, stride in zip(outputs, ANCHOR_MASKS, STRIDES):
            anchors = [v for i in mask for v in ANCHORS[i]]
            b, s = paddle.vision.ops.yolo_box(
                out, origin_shape, anchors, self.net.num_classes, CONF_THRESHOLD, stride,
                clip_bbox=True, scale_x_y=1.0)
            boxes.append(b)
            scores.append(s)
        boxes = paddle.concat(boxes, axis=1)
        scores = paddle.transpose(paddle.concat(scores, axis=1), perm=[0, 2, 1])
        # ppdet/modeling/ops.py multiclass_nms: (score_threshold, nms_top_k, keep_top_k,
        # nms_threshold, normalized, nms_eta, background_label)
        bbox, _, bbox_num = paddle._C_ops.multiclass_nms3(
            boxes, scores, None, NMS["score_threshold"], NMS["nms_top_k"], NMS["keep_top_k"],
            NMS["nms_threshold"], False, 1.0, -1)
        return bbox, bbox_num
