"""Pictures for a champion-vs-challenger report: where the two models disagree, and PR curves.

Numbers say *how much* two models differ; a reviewer also wants to see
*where*. Two PNGs, drawn with matplotlib's `Agg` backend (no display in a
pipeline pod):

* a grid of the val images on which the models disagree most, each drawn
  twice (candidate, production) with its boxes labelled by class and score
  and the ground truth as thin white outlines. "Disagree" counts, per image,
  the difference in correct and in wrong confident detections (score at or
  above the drawing threshold; correct = a true positive at IoU 0.5 as COCO
  matches it, `promotion.decision.coco_ap`), so an image one model gets right and the
  other wrong ranks first;
* the precision-recall curve at IoU 0.5 of each model (COCO's 101-point
  interpolated precision, averaged over classes: its area is mAP@0.5), from
  faster-coco-eval's accumulated `precision` array.

`disagreement` and `pr_curve` are pure; the `plot_*` functions write files.
"""

import contextlib
import io
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from promotion.decision.coco_ap import RECALL_THRESHOLDS, Matched, match_detections

__all__ = ["disagreement", "disagreement_matched", "plot_disagreements", "plot_pr_curves",
           "pr_curve"]

Detections = Sequence[Mapping[str, Any]]


def _confident_counts(matched: Matched, threshold: float
                      ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    keep = matched.score >= threshold
    n = len(matched.image_ids)
    right = np.bincount(matched.image[keep & matched.tp[:, 0]], minlength=n)
    wrong = np.bincount(matched.image[keep & matched.fp[:, 0]], minlength=n)
    return right, wrong


def disagreement(ground_truth: Mapping[str, Any], candidate: Detections,
                 production: Detections, threshold: float = 0.5) -> list[tuple[int, int]]:
    """(image id, disagreement) for every image, most disagreement first (ties: by id)."""
    return disagreement_matched(match_detections(ground_truth, candidate),
                                match_detections(ground_truth, production), threshold)


def disagreement_matched(candidate: Matched, production: Matched, threshold: float = 0.5
                         ) -> list[tuple[int, int]]:
    """`disagreement` of detections already matched against the same ground truth."""
    if candidate.image_ids != production.image_ids:
        raise ValueError("candidate and production were matched on different images")
    right_c, wrong_c = _confident_counts(candidate, threshold)
    right_p, wrong_p = _confident_counts(production, threshold)
    score = np.abs(right_c - right_p) + np.abs(wrong_c - wrong_p)
    return sorted(zip(candidate.image_ids, score.tolist()), key=lambda pair: (-pair[1], pair[0]))


def pr_curve(ground_truth: Mapping[str, Any], detections: Detections
             ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(recall thresholds, precision) at IoU 0.5, all areas, 100 detections, class mean."""
    # lazy: optional, faster-coco-eval
    from faster_coco_eval import COCO, COCOeval_faster

    if not detections:  # nothing found: precision 0 at every recall
        return RECALL_THRESHOLDS.copy(), np.zeros(len(RECALL_THRESHOLDS))
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(dict(ground_truth))
        dt = gt.loadRes([dict(d) for d in detections])
        ev = COCOeval_faster(gt, dt, iouType="bbox", print_function=lambda *a, **k: None)
        ev.evaluate()
        ev.accumulate()
    precision = np.asarray(ev.eval["precision"])[0, :, :, 0, -1]  # (recall, classes)
    masked = np.where(precision >= 0, precision, np.nan)  # -1: a class with no ground truth
    with np.errstate(invalid="ignore"):
        mean = np.nanmean(masked, axis=1) if np.isfinite(masked).any() else np.zeros(len(masked))
    return RECALL_THRESHOLDS.copy(), np.nan_to_num(mean)


def _pyplot() -> Any:
    # lazy: optional, matplotlib (controller extra)
    import matplotlib

    matplotlib.use("Agg")
    # lazy: optional, matplotlib (controller extra)
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


def _draw(ax: Any, image: Any, boxes: Detections, truth: Sequence[Mapping[str, Any]],
          names: Mapping[int, str], threshold: float, colour: str, title: str) -> None:
    # lazy: optional, matplotlib (controller extra)
    from matplotlib.patches import Rectangle

    ax.imshow(image)
    for ann in truth:
        x, y, w, h = ann["bbox"]
        ax.add_patch(Rectangle((x, y), w, h, fill=False, edgecolor="white", lw=0.8, ls="--"))
    for det in boxes:
        if det["score"] < threshold:
            continue
        x, y, w, h = det["bbox"]
        ax.add_patch(Rectangle((x, y), w, h, fill=False, edgecolor=colour, lw=1.4))
        ax.text(x, y, f"{names.get(det['category_id'], det['category_id'])} {det['score']:.2f}",
                color="black", fontsize=5, backgroundcolor=colour, va="bottom")
    ax.set_title(title, fontsize=7)
    ax.axis("off")


def plot_disagreements(ground_truth: Mapping[str, Any], image_root: pathlib.Path,
                       candidate: Detections, production: Detections,
                       ranked: Sequence[tuple[int, int]], path: pathlib.Path,
                       count: int = 6, threshold: float = 0.5) -> list[int]:
    """A grid: one row per image (the `count` first of `ranked`), candidate left, production
    right; dashed white boxes are the ground truth. Returns the image ids drawn."""
    # lazy: optional, pillow
    from PIL import Image

    plt = _pyplot()
    chosen = [image_id for image_id, _ in ranked[:count]]
    files = {int(img["id"]): img["file_name"] for img in ground_truth["images"]}
    names = {int(c["id"]): str(c.get("name", c["id"])) for c in ground_truth["categories"]}
    score = dict(ranked)

    def of(dets: Detections, image_id: int) -> list[Mapping[str, Any]]:
        return [d for d in dets if d["image_id"] == image_id]

    rows = max(1, len(chosen))
    fig, axes = plt.subplots(rows, 2, figsize=(5, 2.5 * rows), dpi=110, squeeze=False)
    for row, image_id in enumerate(chosen):
        with Image.open(image_root / files[image_id]) as img:
            pixels = np.asarray(img.convert("RGB"))
        truth = [a for a in ground_truth["annotations"] if a["image_id"] == image_id]
        head = f"image {image_id} (disagreement {score[image_id]})"
        _draw(axes[row][0], pixels, of(candidate, image_id), truth, names, threshold,
              "tab:orange", f"candidate: {head}")
        _draw(axes[row][1], pixels, of(production, image_id), truth, names, threshold,
              "tab:cyan", f"production: {head}")
    if not chosen:
        for ax in axes[0]:
            ax.axis("off")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return chosen
