"""Model-quality signals of one answer: what the detector said about one image.

Per image: the detections scoring at least the model's `draw_threshold` (the ones a
user would draw), the best score, the confident detections per class on a bounded label
set (the model's `labels:` plus `OTHER`), and for encoded images the input's mean
brightness and size. Pure numpy on arrays the request already holds; the server turns
the records into metrics (`ServerMetrics.observe_answer`). Why these:
docs/inside-serving.md, "Metrics".
"""

import collections
import dataclasses
from collections.abc import Collection, Sequence

import numpy as np

#: The class label for a detection whose class is not among the model's labels.
OTHER = "other"

#: Bucket bounds of the metric families (`serving.metrics`); +Inf is implied.
DETECTION_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100)
SCORE_BUCKETS = tuple(round(0.05 * i, 2) for i in range(1, 21))  # 0.05 .. 1.0
BRIGHTNESS_BUCKETS = SCORE_BUCKETS
PIXEL_BUCKETS = tuple(2**e for e in range(10, 25))  # 1 Ki .. 16 Mi pixels


@dataclasses.dataclass(frozen=True)
class InputStats:
    """One decoded image, before normalisation."""

    brightness: float  # mean pixel value scaled to 0..1
    pixels: int  # width * height as decoded (before any resize)


@dataclasses.dataclass(frozen=True)
class AnswerSignals:
    """The quality signals of the answer for one image."""

    detections: int
    top_score: float  # highest detection score; 0.0 without detections
    classes: tuple[tuple[str, int], ...]  # (class label, detections); labels bounded
    image: InputStats | None = None  # None: a raw-tensor request (nothing decoded)


def input_stats(rgb: np.ndarray, width: int, height: int) -> InputStats:
    """Stats of one decoded image: `rgb` holds its 0..255 pixel values (H x W x C).

    `rgb` may be the image already resized to the model's input size (the
    server passes the array it has in hand, a fixed cost per image): a
    bilinear resize keeps the mean to within ~0.001, far below a bucket's
    0.05. `width` x `height` are the decoded size either way.
    """
    mean = float(rgb.sum()) / (rgb.size * 255.0) if rgb.size else 0.0  # .mean() costs more
    return InputStats(brightness=mean, pixels=int(width) * int(height))


def class_label(name: str | bytes, classes: Collection[str]) -> str:
    """`name` if it is one of the model's classes, else `OTHER`."""
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    return name if name in classes else OTHER


def answer_signals(
    scores: np.ndarray,
    labels: Sequence[str | bytes] | np.ndarray,
    classes: Collection[str],
    image: InputStats | None = None,
    min_score: float = 0.0,
) -> AnswerSignals:
    """The signals of one image's answer: its detections' `scores` and class `labels`
    (the names the client receives, in the same order), the model's `classes`;
    detections and classes count those scoring at least `min_score`."""
    if len(scores) != len(labels):
        raise ValueError(f"{len(scores)} scores for {len(labels)} labels")
    confident = np.asarray(scores) >= min_score
    kept = [name for name, keep in zip(labels, confident.tolist()) if keep]
    counts: dict[str, int] = {}
    for name, count in collections.Counter(kept).items():  # a few distinct names
        label = class_label(name, classes)
        counts[label] = counts.get(label, 0) + count
    top = float(np.max(scores)) if len(scores) else 0.0
    return AnswerSignals(len(kept), top, tuple(counts.items()), image)


def split_answers(
    bbox: np.ndarray,
    counts: np.ndarray,
    labels: Sequence[str | bytes] | np.ndarray,
    classes: Collection[str],
    inputs: Sequence[InputStats | None] | None = None,
    min_score: float = 0.0,
) -> tuple[AnswerSignals, ...]:
    """One record per image of a batch answer (`bbox` rows of (class id, score, x1, y1,
    x2, y2), `counts` rows per image, `labels` one name per row)."""
    records = []
    start = 0
    for i, count in enumerate(counts.tolist()):
        end = start + count
        stats = inputs[i] if inputs is not None else None
        records.append(answer_signals(bbox[start:end, 1], labels[start:end], classes, stats,
                                      min_score))
        start = end
    if start != len(bbox):
        raise ValueError(f"bbox_num adds up to {start}, bbox has {len(bbox)} rows")
    return tuple(records)
