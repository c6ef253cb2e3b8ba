"""PaddleDetection's preprocessing and inputs, as its own deploy code does them.

Upstream (PaddleDetection release/2.7): `deploy/python/preprocess.py` (`decode_image`,
`Resize`, `NormalizeImage`, `Permute`, `PadStride`, `preprocess`) and
`deploy/python/infer.py` (`create_inputs`, `Detector.predict`). Each op does the
upstream arithmetic in the upstream dtypes, so an export answers the server as it
answers `infer.py`. The ops one by one: docs/inside-serving.md.
"""

import dataclasses
from typing import Callable, Sequence

import cv2
import numpy as np

from serving.errors import BadRequest, InferenceFailed, ModelDirError
from serving.modeldir import TensorSpec
from serving.ppdet_config import (
    NormalizeImageOp,
    PadStrideOp,
    PermuteOp,
    PPDetConfig,
    PreprocessOp,
    ResizeOp,
)
from serving.preprocess import (
    MAX_REQUEST_PIXELS,
    PixelBudget,
    check_count,
    is_jpeg,
    open_image,
)
from serving.quality import InputStats, input_stats

#: PaddleDetection's input names; `x` is an older export's name for `image` (infer.py).
IMAGE_INPUTS = ("image", "x")
INFO_INPUTS = ("im_shape", "scale_factor")


@dataclasses.dataclass
class ImInfo:
    """Upstream's `im_info` for one image."""

    im_shape: np.ndarray  # float32 [2]: (height, width) the model sees, before padding
    scale_factor: np.ndarray  # float32 [2]: (scale_y, scale_x) from the decoded image


def decode_image(data: bytes, what: str, budget: PixelBudget | None = None,
                 reduce: int = 1) -> np.ndarray:
    """One PNG or JPEG -> RGB uint8 HWC, as upstream's `decode_image` reads a file:
    `cv2.imdecode(data, 1)` (BGR), then `cv2.COLOR_BGR2RGB`. The header is checked
    first (format, pixel budget and JPEG scans, `serving.preprocess.open_image`).
    `reduce` 2, 4 or 8: a JPEG decoded at that fraction of its size (libjpeg's DCT
    scaling, `cv2.IMREAD_REDUCED_COLOR_*`)."""
    open_image(data, what, budget)
    bgr = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), _IMREAD[reduce])
    if bgr is None:
        raise BadRequest(f"{what}: not a decodable PNG or JPEG image")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


_IMREAD = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
           8: cv2.IMREAD_REDUCED_COLOR_8}


def reduction(op: ResizeOp, height: int, width: int) -> int:
    """The largest DCT scale-down (8, 4, 2; else 1) after which the image is still at
    least as large as the first `Resize` makes it: that Resize shrinks it anyway."""
    scale_y, scale_x = resize_scale(op, height, width)
    out_h, out_w = round(height * scale_y), round(width * scale_x)
    for factor in (8, 4, 2):
        if -(-height // factor) >= out_h and -(-width // factor) >= out_w:
            return factor
    return 1


def resize_scale(op: ResizeOp, height: int, width: int) -> tuple[float, float]:
    """Upstream `Resize.generate_scale`: (im_scale_y, im_scale_x)."""
    if op.keep_ratio:
        im_size_min, im_size_max = min(height, width), max(height, width)
        target_min, target_max = min(op.target_size), max(op.target_size)
        im_scale = float(target_min) / float(im_size_min)
        if np.round(im_scale * im_size_max) > target_max:
            im_scale = float(target_max) / float(im_size_max)
        return im_scale, im_scale
    resize_h, resize_w = op.target_size
    return resize_h / float(height), resize_w / float(width)


def resize(im: np.ndarray, info: ImInfo, op: ResizeOp) -> tuple[np.ndarray, ImInfo]:
    """Upstream `Resize.__call__`."""
    scale_y, scale_x = resize_scale(op, im.shape[0], im.shape[1])
    im = cv2.resize(im, None, None, fx=scale_x, fy=scale_y, interpolation=op.interp)
    return im, ImInfo(np.array(im.shape[:2]).astype("float32"),
                      np.array([scale_y, scale_x]).astype("float32"))


def resize_reduced(im: np.ndarray, height: int, width: int, op: ResizeOp
                   ) -> tuple[np.ndarray, ImInfo]:
    """Upstream `Resize` of a `height` x `width` image that was decoded reduced: the
    same output size, `im_shape` and `scale_factor` as from the full image."""
    scale_y, scale_x = resize_scale(op, height, width)
    out_h, out_w = round(height * scale_y), round(width * scale_x)
    im = cv2.resize(im, (out_w, out_h), interpolation=op.interp)
    return im, ImInfo(np.array([out_h, out_w], dtype=np.float32),
                      np.array([scale_y, scale_x]).astype("float32"))


def normalize(im: np.ndarray, op: NormalizeImageOp) -> np.ndarray:
    """Upstream `NormalizeImage.__call__` (float32 throughout, mean/std broadcast)."""
    im = im.astype(np.float32, copy=False)
    if op.is_scale:
        im *= 1.0 / 255.0
    if op.norm_type == "mean_std":
        im -= np.array(op.mean)[np.newaxis, np.newaxis, :]
        im /= np.array(op.std)[np.newaxis, np.newaxis, :]
    return im


def permute(im: np.ndarray) -> np.ndarray:
    """Upstream `Permute.__call__`: HWC -> CHW."""
    return im.transpose((2, 0, 1)).copy()


def pad_stride(im: np.ndarray, op: PadStrideOp) -> np.ndarray:
    """Upstream `PadStride.__call__`: CHW zero-padded to multiples of `stride` (float32)."""
    if op.stride <= 0:
        return im
    channels, height, width = im.shape
    pad_h = int(np.ceil(float(height) / op.stride) * op.stride)
    pad_w = int(np.ceil(float(width) / op.stride) * op.stride)
    padded = np.zeros((channels, pad_h, pad_w), dtype=np.float32)
    padded[:, :height, :width] = im
    return padded


def apply_ops(im: np.ndarray, ops: list[PreprocessOp],
              on_pixels: Callable[[np.ndarray], None] = lambda im: None
              ) -> tuple[np.ndarray, ImInfo]:
    """Upstream `preprocess` after the decode: the ops in order on one RGB HWC image.

    `on_pixels` sees the image once, still 0..255 HWC: after the leading Resize
    ops (the server takes its quality stats there, on the smaller array)."""
    info = ImInfo(np.array(im.shape[:2], dtype=np.float32), np.array([1.0, 1.0], np.float32))
    seen = False
    for op in ops:
        if not seen and not isinstance(op, ResizeOp):
            on_pixels(im)
            seen = True
        if isinstance(op, ResizeOp):
            im, info = resize(im, info, op)
        elif isinstance(op, NormalizeImageOp):
            im = normalize(im, op)
        elif isinstance(op, PermuteOp):
            im = permute(im)
        elif isinstance(op, PadStrideOp):
            im = pad_stride(im, op)
    if not seen:
        on_pixels(im)
    return im, info


def create_inputs(images: list[np.ndarray], infos: list[ImInfo]) -> dict[str, np.ndarray]:
    """Upstream `create_inputs`: CHW images zero-padded to the batch's largest, stacked;
    `im_shape`, `scale_factor` float32 [N, 2]."""
    height = max(im.shape[1] for im in images)
    width = max(im.shape[2] for im in images)
    batch = np.zeros((len(images), images[0].shape[0], height, width), dtype=np.float32)
    for i, im in enumerate(images):
        batch[i, :, :im.shape[1], :im.shape[2]] = im
    return {
        "image": batch,
        "im_shape": np.stack([info.im_shape for info in infos]).astype("float32"),
        "scale_factor": np.stack([info.scale_factor for info in infos]).astype("float32"),
    }


@dataclasses.dataclass
class Prepared:
    """A batch of encoded images made ready for a PaddleDetection export."""

    feeds: dict[str, np.ndarray]  # by the model's input names
    stats: list[InputStats]  # per image, before normalisation


class PPDetImages:
    """Encoded images -> a PaddleDetection export's inputs, its outputs -> detections."""

    def __init__(self, cfg: PPDetConfig, where: str, input_names: list[str],
                 output_names: list[str]) -> None:
        self.cfg = cfg
        unknown = [n for n in input_names if n not in IMAGE_INPUTS + INFO_INPUTS]
        images = [n for n in input_names if n in IMAGE_INPUTS]
        if unknown or len(images) != 1:
            raise ModelDirError(
                f"{where}: infer_cfg.yml is PaddleDetection's, but the model's inputs "
                f"({', '.join(input_names)}) are not PaddleDetection's: one of "
                f"{' or '.join(IMAGE_INPUTS)}, and {', '.join(INFO_INPUTS)}")
        if not output_names:
            raise ModelDirError(f"{where}: the model has no outputs")
        self.image_input = images[0]
        self.input_names = list(input_names)

    def default_spec(self, name: str) -> TensorSpec:
        """An input's spec when the program does not declare it (a legacy .pdmodel)."""
        if name in INFO_INPUTS:
            return TensorSpec(name, "FP32", (-1, 2))
        return TensorSpec(name, "FP32", (-1, 3, -1, -1))

    def feeds(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`create_inputs`' arrays by the model's own input names (`x` gets `image`)."""
        return {n: inputs["image" if n in IMAGE_INPUTS else n] for n in self.input_names}

    def prepare(self, encoded: list[bytes], tensor_name: str = "image",
                before_each: Callable[[], None] = lambda: None,
                max_pixels: int = MAX_REQUEST_PIXELS, reduced_decode: bool = False) -> Prepared:
        """Decode and preprocess each image, then batch them; `BadRequest` for bad images.

        `before_each` runs before each decode and again after (the server stops an
        abandoned or overdue request there by raising). `reduced_decode`: when the
        first op is a `Resize`, a JPEG is decoded at the smallest DCT scale still at
        least the Resize's output, which is then made from it at upstream's size,
        `im_shape` and `scale_factor` (only the pixels differ, a little)."""
        check_count(len(encoded), tensor_name)
        ops = self.cfg.preprocess
        first = ops[0] if ops and isinstance(ops[0], ResizeOp) else None
        images, infos, stats = [], [], []
        budget = PixelBudget(max_pixels)
        for i, data in enumerate(encoded):
            before_each()
            what = f"input '{tensor_name}' element {i}"
            header = open_image(data, what, budget)
            width, height = header.size
            reduce = (reduction(first, height, width)
                      if reduced_decode and first is not None and is_jpeg(header) else 1)
            rgb = decode_image(data, what, PixelBudget(), reduce)
            before_each()

            def take_stats(im: np.ndarray, width: int = width, height: int = height) -> None:
                stats.append(input_stats(im, width, height))

            if reduce > 1 and first is not None:
                rgb, info = resize_reduced(rgb, height, width, first)
                im, _ = apply_ops(rgb, ops[1:], take_stats)
            else:
                im, info = apply_ops(rgb, ops, take_stats)
            images.append(im)
            infos.append(info)
        return Prepared(self.feeds(create_inputs(images, infos)), stats)

    def detections(self, arrays: list[np.ndarray], images: int) -> tuple[np.ndarray, np.ndarray]:
        """The predictor's outputs -> (`bbox` [M, 6] float32, `bbox_num` [N] int32),
        as `Detector.predict` reads them: the first output is the boxes, the second
        (when there is one) the count per image."""
        bbox = arrays[0]
        if bbox.ndim != 2 or bbox.shape[1] != 6:
            raise InferenceFailed(f"the model's first output has shape {list(bbox.shape)}, "
                                  "not PaddleDetection's bbox [M, 6]")
        if len(arrays) > 1:
            counts = arrays[1].reshape(-1).astype(np.int32)
        elif images == 1:  # "some exported model can not get tensor 'bbox_num'" (infer.py)
            counts = np.array([len(bbox)], dtype=np.int32)
        else:
            raise BadRequest(f"this model has no bbox_num output, so it takes one image per "
                             f"request ({images} sent)")
        if len(counts) != images or int(counts.sum()) != len(bbox):
            raise InferenceFailed(f"bbox_num {counts.tolist()} does not split {len(bbox)} "
                                  f"boxes among {images} image(s)")
        return bbox.astype(np.float32, copy=False), counts

    def warm_up_feeds(self) -> dict[str, np.ndarray]:
        """The inputs of one black image of the first Resize's target size, preprocessed:
        a valid `image`, its `im_shape` and a `scale_factor` (1.0 when it needed no resize)."""
        resize_ops = [op for op in self.cfg.preprocess if isinstance(op, ResizeOp)]
        height, width = resize_ops[0].target_size if resize_ops else (64, 64)
        im, info = apply_ops(np.zeros((height, width, 3), np.uint8), self.cfg.preprocess)
        return self.feeds(create_inputs([im], [info]))


def split_ppdet_batch(outputs: list[np.ndarray], sizes: Sequence[int]) -> list[list[np.ndarray]]:
    """A batched run's outputs -> each request's (`runtime.Splitter`): the `bbox` rows
    by `bbox_num`, per-image outputs by images; ValueError when they cannot be told apart
    (the batcher then runs the requests one at a time)."""
    if len(outputs) < 2:
        raise ValueError("no bbox_num output: the boxes cannot be split per request")
    counts = outputs[1].reshape(-1).astype(np.int64)
    images, boxes = sum(sizes), int(counts.sum())
    if len(counts) != images or boxes != len(outputs[0]):
        raise ValueError(f"bbox_num {counts.tolist()} does not split {len(outputs[0])} boxes")
    image_ends = np.cumsum(sizes)
    box_ends = np.cumsum(counts)[image_ends - 1]
    per_request: list[list[np.ndarray]] = [[] for _ in sizes]
    for j, array in enumerate(outputs):
        rows = len(array) if array.ndim else -1
        if j != 1 and rows == boxes and (j == 0 or rows != images):
            ends = box_ends
        elif rows == images:
            ends = image_ends
        else:
            raise ValueError(f"output {j} of shape {list(array.shape)} is neither per box "
                             "nor per image")
        for i, part in enumerate(np.split(array, ends[:-1])):
            per_request[i].append(part)
    return per_request
