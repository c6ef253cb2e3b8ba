"""COCO AP from detections matched once, for any multiset of the val images.

Each detection is matched once, COCO-style, into a record per image and class; a
multiset of images is then a vector of multiplicities, and AP is COCO's 101-point
interpolated precision of the curve those weights give. With all multiplicities 1 this
is COCOeval's mAP (tests hold it to pycocotools and faster-coco-eval). The arithmetic
follows pycocotools (`cocodataset/cocoapi: PythonAPI/pycocotools/cocoeval.py`) with
COCO's defaults. Why and what is not reproduced: docs/gate.md.
"""

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from promotion.errors import DetectionInputError

__all__ = [
    "IOU_THRESHOLDS",
    "MAX_DETS",
    "RECALL_THRESHOLDS",
    "Matched",
    "average_precision",
    "match_detections",
    "mean_ap",
    "precision_curve",
]

IOU_THRESHOLDS: NDArray[np.float64] = np.linspace(0.5, 0.95, 10)
"""COCO's IoU thresholds; index 0 is the 0.5 of mAP@0.5."""

RECALL_THRESHOLDS: NDArray[np.float64] = np.linspace(0.0, 1.0, 101)
"""COCO's recall thresholds for the interpolated precision."""

MAX_DETS = 100
"""COCO keeps the 100 highest-scoring detections per image and class."""

_AREA_MAX = 1e5**2
"""COCO's "all" area range is [0, 1e10]: boxes outside it are ignored."""

_CHUNK_ELEMENTS = 1_000_000
"""Rows x records x thresholds per batch of resamples: bounds memory at ~25 MB per class,
and the batch's arrays stay in the CPU's cache: 1,000 resamples of the demo's val set
took 0.30 s of CPU against 0.52 s in batches of 4,000,000 (same numbers)."""


@dataclass(frozen=True)
class Matched:
    """One model's detections matched once against the ground truth.

    Records of class `k` are `order[k]`'s indices, already in COCO's ranking
    (score descending; ties by image, then by the detection's place in the
    input, as COCOeval's stable sorts leave them).
    """

    image_ids: tuple[int, ...]
    category_ids: tuple[int, ...]
    gt_counts: NDArray[np.int64]  # (images, classes): boxes not ignored
    image: NDArray[np.intp]  # per record: image index
    category: NDArray[np.intp]  # per record: class index
    score: NDArray[np.float64]
    tp: NDArray[np.bool_]  # (records, IoU thresholds)
    fp: NDArray[np.bool_]  # (records, IoU thresholds); neither TP nor FP = ignored
    order: tuple[NDArray[np.intp], ...]  # per class: record indices in COCO's ranking

    def subset(self, images: ArrayLike) -> "Matched":
        """The same matches restricted to some images (indices into `image_ids`).

        Matching is per image, so it is unchanged; the rankings keep their order.
        """
        keep_images = np.unique(np.asarray(images, dtype=np.intp))
        new_index = np.full(len(self.image_ids), -1, dtype=np.intp)
        new_index[keep_images] = np.arange(len(keep_images))
        keep = new_index[self.image] >= 0
        new_record = np.cumsum(keep) - 1
        return Matched(
            image_ids=tuple(self.image_ids[i] for i in keep_images),
            category_ids=self.category_ids, gt_counts=self.gt_counts[keep_images],
            image=new_index[self.image[keep]], category=self.category[keep],
            score=self.score[keep], tp=self.tp[keep], fp=self.fp[keep],
            order=tuple(new_record[o[keep[o]]] for o in self.order),
        )


def _box_iou(dt: NDArray[np.float64], gt: NDArray[np.float64],
             crowd: NDArray[np.bool_]) -> NDArray[np.float64]:
    """IoU of xywh boxes (dt x gt); for a crowd box the union is the detection's area."""
    dx, dy, dw, dh = (dt[:, i : i + 1] for i in range(4))
    gx, gy, gw, gh = (gt[None, :, i] for i in range(4))
    w = np.minimum(dw + dx, gw + gx) - np.maximum(dx, gx)
    h = np.minimum(dh + dy, gh + gy) - np.maximum(dy, gy)
    inter = w * h
    union = np.where(crowd[None, :], dw * dh, dw * dh + gw * gh - inter)
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / union
    return np.where((w > 0) & (h > 0), iou, 0.0)


def _match_one(dt_boxes: NDArray[np.float64], gt_boxes: NDArray[np.float64],
               gt_ignore: NDArray[np.bool_], crowd: NDArray[np.bool_]
               ) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """COCO's greedy matching for one image and class; dts already ranked.

    Returns (matched, ignored), each (dts, thresholds). Ground truth must be
    ordered not-ignored first, as COCOeval orders it.
    """
    t_count = len(IOU_THRESHOLDS)
    matched = np.zeros((len(dt_boxes), t_count), dtype=bool)
    ignored = np.zeros((len(dt_boxes), t_count), dtype=bool)
    if len(gt_boxes) == 0 or len(dt_boxes) == 0:
        return matched, ignored
    ious = _box_iou(dt_boxes, gt_boxes, crowd)
    floors = np.minimum(IOU_THRESHOLDS, 1 - 1e-10)[:, None]
    taken = np.zeros((t_count, len(gt_boxes)), dtype=bool)
    last = len(gt_boxes) - 1
    # A detection with no IoU at the lowest threshold with any box matches nothing at any
    # threshold and takes nothing: skipped (most of a weak model's low-scoring boxes).
    reaching = np.flatnonzero((ious >= floors[0]).any(axis=1))
    for d in reaching:  # all thresholds at once; dts in rank order
        ok = (~taken | crowd) & (ious[d] >= floors)
        # A match with a regular box beats any ignored box; among equals the
        # highest IoU wins, and on a tie the later box (COCOeval's `>=` scan).
        regular = ok & ~gt_ignore
        cand = np.where(regular.any(axis=1, keepdims=True), regular, ok & gt_ignore)
        m = last - np.argmax(np.where(cand, ious[d], -1.0)[:, ::-1], axis=1)
        hit = cand.any(axis=1)
        matched[d] = hit
        ignored[d] = hit & gt_ignore[m]
        taken[hit, m[hit]] = True
    return matched, ignored


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DetectionInputError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def _bbox(item: Mapping[str, Any], where: str) -> list[float]:
    bbox = item.get("bbox")
    if not (isinstance(bbox, (list, tuple)) and len(bbox) == 4):
        raise DetectionInputError(f"{where}: needs bbox [x, y, w, h]")
    return [_number(v, f"{where}.bbox") for v in bbox]


def match_detections(ground_truth: Mapping[str, Any],
                     detections: Sequence[Mapping[str, Any]], name: str = "detections"
                     ) -> Matched:
    """Match a COCO results list against COCO ground truth, once.

    `ground_truth` is a parsed COCO annotations object; `detections` a parsed
    `bbox.json`. Bad items raise `DetectionInputError` naming `name[i]`.
    """
    try:
        images = [int(img["id"]) for img in ground_truth["images"]]
        cats = sorted(int(c["id"]) for c in ground_truth["categories"])
        anns = list(ground_truth["annotations"])
    except (KeyError, TypeError, ValueError) as exc:
        raise DetectionInputError(
            f"ground truth: needs images, categories and annotations with ids ({exc!r})"
        ) from exc
    images = sorted(set(images))  # COCOeval walks images in sorted id order
    img_index = {i: n for n, i in enumerate(images)}
    cat_index = {c: n for n, c in enumerate(cats)}
    gts: dict[tuple[int, int], list[tuple[list[float], bool, bool]]] = {}
    for i, ann in enumerate(anns):
        where = f"ground truth annotations[{i}]"
        if not isinstance(ann, Mapping):
            raise DetectionInputError(f"{where}: expected an object")
        box = _bbox(ann, where)
        key = (img_index.get(ann.get("image_id", -1), -1),
               cat_index.get(ann.get("category_id", -1), -1))
        if key[0] < 0 or key[1] < 0:
            raise DetectionInputError(f"{where}: unknown image_id or category_id")
        crowd = bool(ann.get("iscrowd", 0))
        area = _number(ann.get("area", box[2] * box[3]), f"{where}.area")
        gts.setdefault(key, []).append((box, crowd, crowd or not 0 <= area <= _AREA_MAX))
    dts: dict[tuple[int, int], list[tuple[float, int, list[float]]]] = {}
    for i, det in enumerate(detections):
        where = f"{name}[{i}]"
        if not isinstance(det, Mapping):
            raise DetectionInputError(f"{where}: expected an object")
        key = (img_index.get(det.get("image_id", -1), -1),
               cat_index.get(det.get("category_id", -1), -1))
        if key[0] < 0:
            raise DetectionInputError(f"{where}: image_id {det.get('image_id')!r} is not in "
                                      "the ground truth")
        if key[1] < 0:
            raise DetectionInputError(f"{where}: category_id {det.get('category_id')!r} "
                                      "is unknown")
        dts.setdefault(key, []).append((_number(det.get("score"), f"{where}.score"), i,
                                        _bbox(det, where)))

    gt_counts = np.zeros((len(images), len(cats)), dtype=np.int64)
    for key, boxes in gts.items():
        gt_counts[key] = sum(1 for _, _, ign in boxes if not ign)
    rec_img: list[int] = []
    rec_cat: list[int] = []
    rec_score: list[float] = []
    rec_input: list[int] = []
    rec_matched: list[NDArray[np.bool_]] = []
    rec_ignored: list[NDArray[np.bool_]] = []
    for key, found in dts.items():
        found.sort(key=lambda d: -d[0])  # stable: ties keep input order, as COCOeval's mergesort
        found = found[:MAX_DETS]
        g = sorted(gts.get(key, []), key=lambda b: b[2])  # not-ignored first, stable
        dt_boxes = np.array([d[2] for d in found], dtype=np.float64)
        gt_boxes = np.array([b[0] for b in g], dtype=np.float64).reshape(-1, 4)
        gt_ign = np.array([b[2] for b in g], dtype=bool)
        is_crowd = np.array([b[1] for b in g], dtype=bool)
        matched, ignored = _match_one(dt_boxes, gt_boxes, gt_ign, is_crowd)
        # Unmatched detections outside COCO's area range are ignored, as COCOeval does.
        dt_area = dt_boxes[:, 2] * dt_boxes[:, 3]
        ignored |= ~matched & ~((dt_area >= 0) & (dt_area <= _AREA_MAX))[:, None]
        rec_img += [key[0]] * len(found)
        rec_cat += [key[1]] * len(found)
        rec_score += [d[0] for d in found]
        rec_input += [d[1] for d in found]
        rec_matched.append(matched)
        rec_ignored.append(ignored)
    t_count = len(IOU_THRESHOLDS)
    matched_all = np.concatenate(rec_matched) if rec_matched else np.zeros((0, t_count), bool)
    ignored_all = np.concatenate(rec_ignored) if rec_ignored else np.zeros((0, t_count), bool)
    image = np.array(rec_img, dtype=np.intp)
    category = np.array(rec_cat, dtype=np.intp)
    score = np.array(rec_score, dtype=np.float64)
    # COCO's ranking: score descending, ties by image (the order accumulate()
    # concatenates images in), then by place in the input file.
    rank = np.lexsort((np.array(rec_input, dtype=np.intp), image, -score))
    order = tuple(rank[category[rank] == k] for k in range(len(cats)))
    return Matched(
        image_ids=tuple(images), category_ids=tuple(cats), gt_counts=gt_counts,
        image=image, category=category, score=score,
        tp=matched_all & ~ignored_all, fp=~matched_all & ~ignored_all, order=order,
    )


def _first_at_least(npig: NDArray[np.int64]) -> NDArray[np.int64]:
    """Per row, per recall threshold r: the least TP count j with j / npig >= r.

    Computed on the same floats COCOeval compares (`tp / npig` against
    `recThrs`), so the lookup below finds exactly the index its
    `np.searchsorted(rc, recThrs, side='left')` finds.
    """
    n = npig.astype(np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        j = np.ceil(RECALL_THRESHOLDS[None, :] * n).astype(np.int64)
        j = np.where((j - 1) / n >= RECALL_THRESHOLDS, j - 1, j)
        j = np.where(j / n < RECALL_THRESHOLDS, j + 1, j)
    return np.maximum(j, 0)


def _class_ap(tp: NDArray[np.bool_], fp: NDArray[np.bool_], weight: NDArray[np.int64],
              npig: NDArray[np.int64]) -> NDArray[np.float64]:
    """AP per (resample, threshold) for one class's ranked records.

    `tp`, `fp`: (records, thresholds); `weight`: (resamples, records) image
    multiplicities; `npig`: (resamples,) ground-truth boxes. NaN where the
    resample holds no ground truth of the class (COCO leaves the class out).
    """
    out = _class_precision(tp, fp, weight, npig).mean(axis=-1)
    return np.where((npig > 0)[:, None], out, np.nan)


def _class_precision(tp: NDArray[np.bool_], fp: NDArray[np.bool_], weight: NDArray[np.int64],
                     npig: NDArray[np.int64]) -> NDArray[np.float64]:
    """COCO's interpolated precision per (resample, threshold, recall threshold) for one
    class's ranked records (arguments as `_class_ap`'s); 0 where a recall is not reached."""
    rows, t_count = weight.shape[0], tp.shape[1]
    out = np.zeros((rows, t_count, len(RECALL_THRESHOLDS)))
    ignored = ~tp & ~fp
    # Recall thresholds are first reached at true positives, and the precision
    # after a false positive is below the one at the true positive before it, so
    # the interpolated curve is read off at TP records only (kept with ignored
    # ones, which move neither count); the false positives between them enter
    # through their weighted count. With a weak model's many low-scoring boxes
    # this keeps about a tenth of the records (a real 200-image val set: 2,630
    # records of one class, 228 TPs).
    keep = np.flatnonzero((tp | ignored).any(axis=1))
    n = len(keep)
    if n > 0:
        seen = np.cumsum(weight, axis=1)[:, keep][:, None, :]  # records up to each kept one
        w = weight[:, keep][:, None, :]
        tp_cum = np.cumsum(w * tp[keep].T[None, :, :], axis=-1)
        # TP + FP counts are the records seen less the ignored ones: the same integers as
        # tp_cum + fp_cum, without building fp_cum (a third of this function's time).
        scored = seen
        if ignored.any():
            scored = seen - np.cumsum(w * ignored[keep].T[None, :, :], axis=-1)
        prec = tp_cum / (scored + np.spacing(1))
        # Interpolated precision: the best precision at this recall or beyond.
        prec = np.maximum.accumulate(prec[..., ::-1], axis=-1)[..., ::-1]
        need = np.broadcast_to(_first_at_least(npig)[:, None, :], (rows, t_count,
                                                                     len(RECALL_THRESHOLDS)))
        # One searchsorted for all rows: shift row r's (integer, non-decreasing)
        # TP counts by r * big so the rows concatenate into one sorted array.
        big = int(max(tp_cum.max(initial=0), need.max(initial=0))) + 2
        shift = (np.arange(rows * t_count, dtype=np.int64) * big).reshape(rows, t_count)
        flat = (tp_cum + shift[..., None]).ravel()
        pos = np.searchsorted(flat, (need + shift[..., None]).ravel(), side="left")
        pos = pos.reshape(need.shape) - (np.arange(rows * t_count) * n).reshape(
            rows, t_count, 1)
        found = pos < n
        q = np.take_along_axis(prec, np.where(found, pos, 0), axis=-1)
        out = np.where(found, q, 0.0)
    return out


def average_precision(matched: Matched, weights: NDArray[np.int64],
                      thresholds: slice = slice(None)) -> NDArray[np.float64]:
    """AP per (resample, IoU threshold, class) for image multiplicities `weights`.

    `weights` is (resamples, images), in `matched.image_ids` order; a row of
    ones is the val set itself. NaN where a resample has no ground truth of a
    class. mAP@0.5 is `np.nanmean(ap[:, 0], axis=-1)`, mAP the mean over
    thresholds and classes. `thresholds` picks IoU thresholds (`slice(0, 1)`:
    only 0.5, ten times cheaper).
    """
    weights = np.asarray(weights, dtype=np.int64)
    if weights.ndim != 2 or weights.shape[1] != len(matched.image_ids):
        raise ValueError(f"weights must be (resamples, {len(matched.image_ids)}), "
                         f"got {weights.shape}")
    npig = weights @ matched.gt_counts  # (resamples, classes)
    tp, fp = matched.tp[:, thresholds], matched.fp[:, thresholds]
    result = np.empty((weights.shape[0], tp.shape[1], len(matched.category_ids)))
    for k, recs in enumerate(matched.order):
        step = max(1, _CHUNK_ELEMENTS // max(1, len(recs) * tp.shape[1]))
        for start in range(0, weights.shape[0], step):
            rows = slice(start, start + step)
            result[rows, :, k] = _class_ap(tp[recs], fp[recs],
                                           weights[rows][:, matched.image[recs]], npig[rows, k])
    return result


def precision_curve(matched: Matched, threshold: int = 0) -> NDArray[np.float64]:
    """COCO's interpolated precision at each of `RECALL_THRESHOLDS` (rows) per class
    (columns) on the val set itself, at IoU threshold index `threshold` (0: IoU 0.5):
    COCOeval's `eval["precision"][threshold, :, :, all areas, 100 dets]`; NaN for a class
    without ground truth (COCOeval's -1). Its mean over recall is `average_precision`."""
    ones = np.ones((1, len(matched.image_ids)), dtype=np.int64)
    npig = (ones @ matched.gt_counts)[0]
    picked = slice(threshold, threshold + 1)
    curve = np.full((len(RECALL_THRESHOLDS), len(matched.category_ids)), np.nan)
    for k, recs in enumerate(matched.order):
        if npig[k] > 0:
            curve[:, k] = _class_precision(matched.tp[recs, picked], matched.fp[recs, picked],
                                           ones[:, matched.image[recs]], npig[k:k + 1])[0, 0]
    return curve


def mean_ap(ap: NDArray[np.float64]) -> dict[str, NDArray[np.float64]]:
    """mAP@0.5 and mAP@[.5:.95] per resample, as COCOeval averages (classes with GT)."""
    with warnings.catch_warnings():  # an all-NaN row (no GT at all) is NaN, not a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        return {"map50": np.nanmean(ap[:, 0, :], axis=-1),
                "map": np.nanmean(ap.mean(axis=1), axis=-1)}
