"""The paired bootstrap: its AP is COCOeval's, a resample is a val set, the interval is honest.

The references are pycocotools' COCOeval (`cocodataset/cocoapi:
PythonAPI/pycocotools/cocoeval.py`, `evaluateImg` and `accumulate`) and
faster-coco-eval's port of it, both run for real on the same data.
"""

import contextlib
import copy
import io

import numpy as np
import pytest
from faster_coco_eval import COCO as FastCOCO
from faster_coco_eval import COCOeval_faster
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from promotion.paired import (
    BootstrapInputError,
    average_precision,
    bootstrap_weights,
    match_detections,
    paired_bootstrap,
)
from tests.fixtures.detections import detect, make_gt


def pycoco(gt: dict, dets: list) -> tuple[float, float]:
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = copy.deepcopy(gt)
        coco.createIndex()
        ev = COCOeval(coco, coco.loadRes(copy.deepcopy(dets)), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(ev.stats[0]), float(ev.stats[1])


def faster(gt: dict, dets: list) -> tuple[float, float]:
    with contextlib.redirect_stdout(io.StringIO()):
        coco = FastCOCO(copy.deepcopy(gt))
        ev = COCOeval_faster(coco, coco.loadRes(copy.deepcopy(dets)), iouType="bbox",
                             print_function=lambda *a, **k: None)
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(ev.stats[0]), float(ev.stats[1])


def ours(gt: dict, dets: list, weights=None) -> tuple[float, float]:
    matched = match_detections(gt, dets)
    if weights is None:
        weights = np.ones((1, len(matched.image_ids)), dtype=np.int64)
    ap = average_precision(matched, weights)
    return float(np.nanmean(ap[0])), float(np.nanmean(ap[0, 0]))


CASES = {
    "plain": (dict(images=60), dict()),
    "crowd boxes": (dict(images=60, crowd=0.15), dict()),
    "tied scores": (dict(images=60), dict(round_scores=2)),
    "crowded, noisy, coarse scores": (dict(images=40, per_image=8, crowd=0.2),
                                      dict(noise=3.0, round_scores=1, jitter=0.15)),
    # more than COCO's 100 detections of one class in an image: only the top 100 count
    "over 100 per image": (dict(images=6, per_image=60), dict(noise=150.0)),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("reference", [pycoco, faster], ids=["pycocotools", "faster-coco-eval"])
def test_full_set_equals_cocoeval(case, reference):
    gt_kw, dt_kw = CASES[case]
    gt = make_gt(7, **gt_kw)
    dets = detect(gt, 11, **dt_kw)
    expected = reference(gt, dets)
    assert 0.05 < expected[1] < 0.99  # not a trivial all-or-nothing case
    assert ours(gt, dets) == pytest.approx(expected, abs=1e-6)


def test_a_class_without_detections_scores_zero_and_one_without_gt_is_left_out():
    gt = make_gt(3, images=30)
    dets = [d for d in detect(gt, 4) if d["category_id"] != 2]
    gt["categories"] = gt["categories"] + [{"id": 9, "name": "unused"}]
    assert ours(gt, dets) == pytest.approx(pycoco(gt, dets), abs=1e-6)


def test_a_resample_is_a_val_set_with_renamed_copies():
    """Weights 0, 1, 2, 3 per image give COCOeval's mAP on the val set holding that
    many copies of each image (ids renamed): duplicates count as distinct images.

    Scores are made distinct here: with tied scores in different images COCOeval's
    answer depends on the images' id order, which renaming the copies changes."""
    gt = make_gt(5, images=25, crowd=0.1)
    dets = detect(gt, 6)
    for d, score in zip(dets, np.random.default_rng(1).permutation(len(dets))):
        d["score"] = float(score + 1) / len(dets)
    weights = np.random.default_rng(0).integers(0, 4, size=(1, 25))
    copies: dict = {"images": [], "annotations": [], "categories": gt["categories"]}
    copied = []
    for img, times in zip(gt["images"], weights[0]):
        for c in range(int(times)):
            new_id = img["id"] + 1000 * (c + 1)
            copies["images"].append({**img, "id": new_id})
            for a in gt["annotations"]:
                if a["image_id"] == img["id"]:
                    copies["annotations"].append(
                        {**a, "id": len(copies["annotations"]) + 1, "image_id": new_id})
            copied += [{**d, "image_id": new_id} for d in dets if d["image_id"] == img["id"]]
    assert ours(gt, dets, weights) == pytest.approx(pycoco(copies, copied), abs=1e-6)


def test_bootstrap_weights_are_seeded_draws_with_replacement():
    w = bootstrap_weights(50, 200, seed=3)
    assert w.shape == (200, 50)
    assert (w.sum(axis=1) == 50).all()
    assert (w.max(axis=1) >= 2).all()  # with replacement: some image drawn twice
    assert np.array_equal(w, bootstrap_weights(50, 200, seed=3))
    assert not np.array_equal(w, bootstrap_weights(50, 200, seed=4))


def test_same_detections_give_zero_difference_exactly():
    gt = make_gt(1, images=80)
    dets = detect(gt, 2)
    result = paired_bootstrap(gt, dets, dets, resamples=200, seed=0)
    for key in ("map50", "map"):
        d = result.difference[key]
        assert (d.estimate, d.low, d.high) == (0.0, 0.0, 0.0)
        c = result.candidate[key]
        assert c.low < c.estimate < c.high  # each model alone is uncertain; the pair is not


def test_paired_interval_is_narrower_than_the_models_own():
    """Pairing removes the image-to-image variation both models share."""
    gt = make_gt(2, images=200)
    result = paired_bootstrap(gt, detect(gt, 3), detect(gt, 3, recall=0.8),
                              resamples=300, seed=1)
    diff = result.difference["map50"]
    own = result.candidate["map50"]
    assert diff.high - diff.low < own.high - own.low
    assert result.images == 200 and result.resamples == 300
    assert [c.name for c in result.classes] == ["circle", "square", "triangle"]
    assert result.class_confidence == pytest.approx(1 - 0.05 / 3)


def test_seeded_result_is_reproducible():
    gt = make_gt(4, images=50)
    a, b = detect(gt, 1), detect(gt, 2)
    first = paired_bootstrap(gt, a, b, resamples=100, seed=9)
    assert first == paired_bootstrap(gt, a, b, resamples=100, seed=9)
    assert first != paired_bootstrap(gt, a, b, resamples=100, seed=10)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda gt, d: d[0].update(image_id=999), "candidate[0]: image_id 999 is not in"),
        (lambda gt, d: d[1].update(category_id=7), "candidate[1]: category_id 7 is unknown"),
        (lambda gt, d: d[2].update(score="high"), "candidate[2].score: expected a number"),
        (lambda gt, d: d[3].pop("bbox"), "candidate[3]: needs bbox"),
        (lambda gt, d: gt["annotations"][0].update(bbox=[1, 2]),
         "ground truth annotations[0]: needs bbox"),
        (lambda gt, d: gt.pop("images"), "ground truth: needs images"),
        (lambda gt, d: gt.update(annotations=[]), "no annotations that COCO would score"),
    ],
)
def test_bad_input_names_the_item(change, message):
    gt = make_gt(0, images=5)
    dets = detect(gt, 0, recall=1.0)
    change(gt, dets)
    with pytest.raises(BootstrapInputError, match=message.replace("[", r"\[").replace("]",
                                                                                      r"\]")):
        paired_bootstrap(gt, dets, detect(make_gt(0, images=5), 1), resamples=10)
