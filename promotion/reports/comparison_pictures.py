"""Pictures for a champion-vs-challenger report: where the two models disagree, and PR curves.

Two PNGs: a grid of the val images on which the models disagree most, each drawn for
both models with the ground truth (Pillow), and each model's precision-recall curve at
IoU 0.5 from faster-coco-eval's accumulated `precision` (matplotlib's `Agg` backend).
`disagreement_matched` and `pr_curve_matched` are pure (they read the detections as
`promotion.decision.coco_ap` matched them); the `plot_*` functions write files. Why:
docs/inside-promotion.md, "Reports".
"""

import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from promotion.decision.coco_ap import (
    RECALL_THRESHOLDS,
    Matched,
    precision_curve,
)

__all__ = ["disagreement_matched", "plot_disagreements", "plot_pr_curves", "pr_curve_matched"]

Detections = Sequence[Mapping[str, Any]]


def _confident_counts(matched: Matched, threshold: float
                      ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    keep = matched.score >= threshold
    n = len(matched.image_ids)
    right = np.bincount(matched.image[keep & matched.tp[:, 0]], minlength=n)
    wrong = np.bincount(matched.image[keep & matched.fp[:, 0]], minlength=n)
    return right, wrong


def disagreement_matched(candidate: Matched, production: Matched, threshold: float = 0.5
                         ) -> list[tuple[int, int]]:
    """(image id, disagreement) for every image, most disagreement first (ties: by id), from
    both models' detections matched against the same ground truth."""
    if candidate.image_ids != production.image_ids:
        raise ValueError("candidate and production were matched on different images")
    right_c, wrong_c = _confident_counts(candidate, threshold)
    right_p, wrong_p = _confident_counts(production, threshold)
    score = np.abs(right_c - right_p) + np.abs(wrong_c - wrong_p)
    return sorted(zip(candidate.image_ids, score.tolist()), key=lambda pair: (-pair[1], pair[0]))


def pr_curve_matched(matched: Matched) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(recall thresholds, precision) at IoU 0.5, all areas, 100 detections, class mean, of
    detections already matched (`promotion.decision.coco_ap`'s precision, COCOeval's to
    1e-12: no second evaluation of the same detections)."""
    return RECALL_THRESHOLDS.copy(), _class_mean(precision_curve(matched, 0))


def _class_mean(masked: NDArray[np.float64]) -> NDArray[np.float64]:
    """(recall, classes) with NaN for a class without ground truth -> the class mean."""
    with np.errstate(invalid="ignore"):
        mean = np.nanmean(masked, axis=1) if np.isfinite(masked).any() else np.zeros(len(masked))
    return np.nan_to_num(mean)


def _pyplot() -> Any:
    # lazy: optional, matplotlib (controller extra)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_pr_curves(curves: Mapping[str, tuple[NDArray[np.float64], NDArray[np.float64]]],
                   path: pathlib.Path, title: str) -> None:
    """One precision-recall line per model (label: name and mAP@0.5)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 4), dpi=100)
    for name, (recall, precision) in curves.items():
        ax.plot(recall, precision, label=f"{name} (AP@0.5 {float(np.mean(precision)):.3f})")
    ax.set(xlabel="recall", ylabel="precision", xlim=(0, 1), ylim=(0, 1.02), title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


PANEL = 256
"""Pixels of a panel's longer side: each image is scaled to it."""

_GAP, _TITLE = 8, 18
_COLOURS = {"candidate": (255, 127, 14), "production": (23, 190, 207)}  # tab:orange, tab:cyan
_DASH = (4, 3)


def _dashed_rectangle(draw: Any, box: Sequence[float], fill: tuple[int, int, int]) -> None:
    """A dashed outline (Pillow draws solid lines only): `_DASH` pixels on, then off."""
    x1, y1, x2, y2 = box
    on, off = _DASH
    for (ax, ay), (bx, by) in (((x1, y1), (x2, y1)), ((x2, y1), (x2, y2)),
                               ((x2, y2), (x1, y2)), ((x1, y2), (x1, y1))):
        length = max(abs(bx - ax), abs(by - ay))
        if length <= 0:
            continue
        at = 0.0
        while at < length:
            end = min(at + on, length)
            draw.line([(ax + (bx - ax) * at / length, ay + (by - ay) * at / length),
                       (ax + (bx - ax) * end / length, ay + (by - ay) * end / length)],
                      fill=fill, width=1)
            at += on + off


def _corners(bbox: Sequence[Any], scale: float) -> tuple[float, float, float, float]:
    """[x, y, w, h] -> scaled (left, top, right, bottom); Pillow refuses a box whose right
    is left of its left (a negative width in a ground truth or a detection)."""
    x, y, w, h = (float(v) * scale for v in bbox)
    return min(x, x + w), min(y, y + h), max(x, x + w), max(y, y + h)


def _panel(image: Any, boxes: Detections, truth: Sequence[Mapping[str, Any]],
           names: Mapping[int, str], threshold: float, colour: tuple[int, int, int],
           font: Any) -> Any:
    """One model's view of one image: scaled to `PANEL`, ground truth dashed white,
    confident detections in `colour` labelled with class and score."""
    # lazy: optional, pillow
    from PIL import Image, ImageDraw

    scale = PANEL / max(image.width, image.height, 1)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    panel = image.resize(size, Image.Resampling.BILINEAR)
    draw = ImageDraw.Draw(panel)
    for ann in truth:
        _dashed_rectangle(draw, _corners(ann["bbox"], scale), (255, 255, 255))
    confident = [d for d in boxes if d["score"] >= threshold]
    for det in confident:
        draw.rectangle(_corners(det["bbox"], scale), outline=colour, width=2)
    for det in confident:  # labels over every box, as matplotlib's texts were
        x, y, _, _ = _corners(det["bbox"], scale)
        label = f"{names.get(det['category_id'], det['category_id'])} {det['score']:.2f}"
        # Above the box's top left corner, moved inside the panel where it would leave it.
        _, _, width, height = draw.textbbox((0, 0), label, font=font, anchor="lt")
        left = min(max(x, 2.0), panel.width - width - 2.0)
        top = max(y - height - 2.0, 2.0)
        draw.rectangle((left - 2, top - 2, left + width + 1, top + height + 1), fill=colour)
        draw.text((left, top), label, fill=(0, 0, 0), font=font, anchor="lt")
    return panel


def plot_disagreements(ground_truth: Mapping[str, Any], image_root: pathlib.Path,
                       candidate: Detections, production: Detections,
                       ranked: Sequence[tuple[int, int]], path: pathlib.Path,
                       count: int = 6, threshold: float = 0.5) -> list[int]:
    """A grid: one row per image (the `count` first of `ranked`), candidate left, production
    right; dashed white boxes are the ground truth. Returns the image ids drawn.

    Composed with Pillow and written once: as matplotlib patches and texts, the
    same picture cost ~1.5 s of CPU per set (layout, one artist per box and label)."""
    from PIL import Image, ImageDraw, ImageFont

    chosen = [image_id for image_id, _ in ranked[:count]]
    files = {int(img["id"]): img["file_name"] for img in ground_truth["images"]}
    names = {int(c["id"]): str(c.get("name", c["id"])) for c in ground_truth["categories"]}
    score = dict(ranked)
    chosen_set = set(chosen)
    truth: dict[int, list[Mapping[str, Any]]] = {i: [] for i in chosen}
    for ann in ground_truth["annotations"]:
        if ann["image_id"] in chosen_set:
            truth[ann["image_id"]].append(ann)
    shown: dict[str, dict[int, list[Mapping[str, Any]]]] = {}
    for who, dets in (("candidate", candidate), ("production", production)):
        shown[who] = {i: [] for i in chosen}
        for det in dets:
            if det["image_id"] in chosen_set:
                shown[who][det["image_id"]].append(det)
    label_font = ImageFont.load_default(size=10)
    title_font = ImageFont.load_default(size=11)
    row_height = _TITLE + PANEL + _GAP
    grid = Image.new("RGB", (2 * PANEL + 3 * _GAP, max(1, len(chosen)) * row_height + _GAP),
                     (255, 255, 255))
    draw = ImageDraw.Draw(grid)
    for row, image_id in enumerate(chosen):
        with Image.open(image_root / files[image_id]) as img:
            pixels = img.convert("RGB")
        head = f"image {image_id} (disagreement {score[image_id]})"
        top = _GAP + row * row_height
        for column, who in enumerate(("candidate", "production")):
            left = _GAP + column * (PANEL + _GAP)
            draw.text((left, top + _TITLE // 2), f"{who}: {head}", fill=(0, 0, 0),
                      font=title_font, anchor="lm")
            grid.paste(_panel(pixels, shown[who][image_id], truth[image_id], names, threshold,
                              _COLOURS[who], label_font), (left, top + _TITLE))
    grid.save(path, format="PNG", compress_level=3)  # 1/3 of the default 6's CPU, +16 % bytes
    return chosen
