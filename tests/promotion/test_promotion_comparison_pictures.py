"""The champion-vs-challenger pictures: the disagreement ranking and its grid.

Covers promotion/reports/comparison_pictures.py: `disagreement_matched` ranks the
same as `disagreement` from the detections and `pr_curve_matched` draws the same
curve as `pr_curve` (faster-coco-eval's accumulated precision, run for real; both
references live here, the product no longer needs them) (the
evaluate step matches each model once and hands the matches over), and
`plot_disagreements` draws each chosen image
twice, the candidate's confident boxes in orange on the left, production's in cyan
on the right, the ground truth dashed white on both (checked on the PNG's pixels).
"""

import contextlib
import io
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from PIL import Image

from promotion.decision.coco_ap import (
    RECALL_THRESHOLDS,
    average_precision,
    match_detections,
    precision_curve,
)
from promotion.reports.comparison_pictures import (
    _COLOURS,
    _class_mean,
    disagreement_matched,
    plot_disagreements,
    pr_curve_matched,
)
from tests.fixtures.detections import detect, make_gt


def disagreement(ground_truth: Mapping[str, Any], candidate: Sequence[Mapping[str, Any]],
                 production: Sequence[Mapping[str, Any]], threshold: float = 0.5
                 ) -> list[tuple[int, int]]:
    """The ranking from the detections themselves (the product ranks matches it made once)."""
    return disagreement_matched(match_detections(ground_truth, candidate),
                                match_detections(ground_truth, production), threshold)


def pr_curve(ground_truth: Mapping[str, Any], detections: Sequence[Mapping[str, Any]]
             ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The reference: faster-coco-eval's accumulated precision at IoU 0.5, all areas,
    100 detections, class mean."""
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
    # -1: a class with no ground truth
    return RECALL_THRESHOLDS.copy(), _class_mean(np.where(precision >= 0, precision, np.nan))


def test_ranking_from_matches_is_the_ranking_from_detections() -> None:
    gt = make_gt(3, images=30)
    cand, prod = detect(gt, 1), detect(gt, 1, recall=0.6)
    ranked = disagreement(gt, cand, prod)
    assert ranked == disagreement_matched(match_detections(gt, cand), match_detections(gt, prod))
    assert ranked[0][1] > 0 and [i for i, _ in ranked] != sorted(i for i, _ in ranked)


def test_ranking_refuses_matches_on_different_images() -> None:
    gt, other = make_gt(3, images=5), make_gt(3, images=6)
    with pytest.raises(ValueError, match="different images"):
        disagreement_matched(match_detections(gt, detect(gt, 1)),
                             match_detections(other, detect(other, 1)))


def test_pr_curve_from_matches_is_cocoevals() -> None:
    gt = make_gt(5, images=40)
    gt["categories"] = gt["categories"] + [{"id": 4, "name": "star"}]  # no ground truth
    for dets in (detect(gt, 2), detect(gt, 2, recall=0.5, noise=3.0), []):
        recall, reference = pr_curve(gt, dets)
        matched = match_detections(gt, dets)
        assert np.array_equal(pr_curve_matched(matched)[0], recall)
        assert np.allclose(pr_curve_matched(matched)[1], reference, rtol=0, atol=1e-12)
        curve = precision_curve(matched)
        assert np.isnan(curve[:, 3]).all()  # the class without ground truth is left out
        ap = average_precision(matched, np.ones((1, 40), dtype=np.int64), slice(0, 1))
        assert np.allclose(curve[:, :3].mean(axis=0), ap[0, 0, :3], rtol=0, atol=1e-15)
    assert reference.sum() == 0  # the last, with no detections, finds nothing


def _pixels_of(grid: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    return np.all(np.abs(grid.astype(int) - colour) <= 8, axis=-1)


def test_grid_draws_each_model_on_its_side(tmp_path: pathlib.Path) -> None:
    Image.new("RGB", (64, 48), (40, 60, 40)).save(tmp_path / "a.png")
    Image.new("RGB", (64, 48), (40, 60, 40)).save(tmp_path / "b.png")
    gt = {"images": [{"id": 7, "file_name": "a.png"}, {"id": 9, "file_name": "b.png"}],
          "categories": [{"id": 1, "name": "circle"}],
          "annotations": [{"id": 1, "image_id": 7, "category_id": 1, "bbox": [10, 10, 20, 20]},
                          {"id": 2, "image_id": 9, "category_id": 1, "bbox": [40, 5, 8, 8]}]}
    cand = [{"image_id": 7, "category_id": 1, "bbox": [12, 12, 20, 20], "score": 0.9},
            {"image_id": 9, "category_id": 1, "bbox": [50, 30, 10, 10], "score": 0.2}]
    prod = [{"image_id": 7, "category_id": 1, "bbox": [30, 20, 30, 20], "score": 0.8},
            # a negative width is drawn as its box, not refused by Pillow
            {"image_id": 9, "category_id": 1, "bbox": [48, 5, -8, 8], "score": 0.7}]
    path = tmp_path / "grid.png"
    shown = plot_disagreements(gt, tmp_path, cand, prod, [(7, 2), (9, 0)], path, count=1)
    assert shown == [7]
    grid = np.asarray(Image.open(path).convert("RGB"))
    half = grid.shape[1] // 2
    orange, cyan = _pixels_of(grid, _COLOURS["candidate"]), _pixels_of(grid, _COLOURS["production"])
    assert orange[:, :half].sum() > 100 and not orange[:, half:].any()
    assert cyan[:, half:].sum() > 100 and not cyan[:, :half].any()
    # the ground truth's outline: white pixels inside each side's image (the dark area)
    white, dark = _pixels_of(grid, (255, 255, 255)), _pixels_of(grid, (40, 60, 40))
    for side in (slice(0, half), slice(half, None)):
        rows = np.flatnonzero(dark[:, side].any(axis=1))
        cols = np.flatnonzero(dark[:, side].any(axis=0))
        inside = white[:, side][rows.min():rows.max(), cols.min():cols.max()]
        assert inside.sum() > 50

    both = plot_disagreements(gt, tmp_path, cand, prod, [(9, 1), (7, 0)], path)
    assert both == [9, 7]
    grid_two = np.asarray(Image.open(path).convert("RGB"))
    assert grid_two.shape[0] > grid.shape[0]  # one row per image
    # image 9's only candidate box scores under the threshold: no orange in its row
    first_row = grid_two[: grid.shape[0]]
    assert not _pixels_of(first_row, _COLOURS["candidate"]).any()


def test_grid_of_nothing_is_still_a_picture(tmp_path: pathlib.Path) -> None:
    gt = {"images": [], "categories": [{"id": 1, "name": "circle"}], "annotations": []}
    path = tmp_path / "empty.png"
    assert plot_disagreements(gt, tmp_path, [], [], [], path) == []
    assert Image.open(path).size[0] > 0
