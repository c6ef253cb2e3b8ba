"""The paired bootstrap: its AP is COCOeval's, a resample is a val set, the interval is honest.

Covers promotion/decision/coco_ap.py (matching once, AP for any image multiplicities)
and promotion/decision/paired.py (the bootstrap on top).

The references are pycocotools' COCOeval (`cocodataset/cocoapi:
PythonAPI/pycocotools/cocoeval.py`, `evaluateImg` and `accumulate`) and
faster-coco-eval's port of it, both run for real on the same data.
"""

import contextlib
import copy
import io
import json

import numpy as np
import pytest
from faster_coco_eval import COCO as FastCOCO
from faster_coco_eval import COCOeval_faster
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from promotion.decision.coco_ap import (
    RECALL_THRESHOLDS,
    _first_at_least,
    average_precision,
    match_detections,
)
from promotion.decision.paired import (
    bootstrap_weights,
    paired_bootstrap,
    paired_bootstrap_matched,
)
from promotion.errors import DetectionInputError
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
    "over 100 per image": (dict(images=6, per_image=60), dict(noise=400.0, hit_score=0.4)),
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


def test_a_crowd_box_absorbs_every_detection_inside_it():
    """COCO lets any number of detections match one crowd box (IoU = overlap / the
    detection's area), and ignores them: neither TP nor FP."""
    gt = make_gt(12, images=20)
    dets = detect(gt, 13)
    for n, img in enumerate(gt["images"][:10]):
        gt["annotations"].append({"id": 1000 + n, "image_id": img["id"], "category_id": 1,
                                  "bbox": [0.0, 0.0, 64.0, 64.0], "area": 4096.0,
                                  "iscrowd": 1})
        dets += [{"image_id": img["id"], "category_id": 1, "score": 0.5 + 0.01 * k,
                  "bbox": [4.0 + 9 * k, 4.0 + 5 * k, 12.0, 14.0]} for k in range(5)]
    expected = pycoco(gt, dets)
    assert ours(gt, dets) == pytest.approx(expected, abs=1e-6)
    assert ours(gt, dets) == pytest.approx(faster(gt, dets), abs=1e-6)


def test_recall_lookup_is_cocoevals_searchsorted_for_every_count():
    """The integer lookup finds the index COCOeval's float `searchsorted` finds,
    including where `k / n` and a recall threshold meet exactly (n = 100, 50 ...)."""
    counts = np.arange(1, 1001)
    need = _first_at_least(counts)
    for n, row in zip(counts, need):
        rc = np.arange(0, n + 1) / n  # recall after 0..n true positives
        assert np.array_equal(np.searchsorted(rc, RECALL_THRESHOLDS, side="left"), row), n


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


def test_subset_equals_cocoeval_on_those_images():
    gt = make_gt(8, images=40, crowd=0.1)
    dets = detect(gt, 9)
    keep = [img["id"] for img in gt["images"]][::3]
    small = {**gt, "images": [i for i in gt["images"] if i["id"] in keep],
             "annotations": [a for a in gt["annotations"] if a["image_id"] in keep]}
    small_dets = [d for d in dets if d["image_id"] in keep]
    matched = match_detections(gt, dets).subset(np.arange(0, 40, 3))
    ap = average_precision(matched, np.ones((1, len(keep)), dtype=np.int64))
    assert (float(np.nanmean(ap[0])), float(np.nanmean(ap[0, 0]))) == pytest.approx(
        pycoco(small, small_dets), abs=1e-6)


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
    assert result.class_confidence == 0.95 and result.class_family == 3


def test_seeded_result_is_reproducible():
    gt = make_gt(4, images=50)
    a, b = detect(gt, 1), detect(gt, 2)
    first = paired_bootstrap(gt, a, b, resamples=100, seed=9)
    assert first == paired_bootstrap(gt, a, b, resamples=100, seed=9)
    assert first != paired_bootstrap(gt, a, b, resamples=100, seed=10)


def test_bootstrap_of_matches_is_the_bootstrap_of_detections():
    """The evaluate step matches each model once and reuses the matches."""
    gt = make_gt(4, images=50)
    a, b = detect(gt, 1), detect(gt, 2)
    assert paired_bootstrap_matched(gt, match_detections(gt, a), match_detections(gt, b),
                                    resamples=100, seed=9) == paired_bootstrap(
        gt, a, b, resamples=100, seed=9)
    other = make_gt(4, images=51)
    with pytest.raises(ValueError, match="different ground truths"):
        paired_bootstrap_matched(gt, match_detections(gt, a),
                                 match_detections(other, detect(other, 2)), resamples=10)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda gt, d: d[0].update(image_id=999), "candidate[0]: image_id 999 is not in"),
        (lambda gt, d: d[1].update(category_id=7), "candidate[1]: category_id 7 is unknown"),
        (lambda gt, d: d[2].update(score="high"), "candidate[2].score: expected a finite number"),
        (lambda gt, d: d[2].update(score=float("nan")), "candidate[2].score: expected a finite"),
        (lambda gt, d: d[4].update(bbox=[1, 2, float("inf"), 3]), "candidate[4].bbox: expected"),
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
    with pytest.raises(DetectionInputError, match=message.replace("[", r"\[").replace("]",
                                                                                      r"\]")):
        paired_bootstrap(gt, dets, detect(make_gt(0, images=5), 1), resamples=10)


def coverage(trials: int, images: int, resamples: int, paired: bool = True) -> float:
    """Share of trials whose 95 % interval covers the population's mAP@0.5 difference.

    The population is 1,000 synthetic images with two correlated detectors (one
    finds more boxes, more precisely); a val set is 200 images drawn from it
    independently (with replacement: i.i.d. from the population, the bootstrap's
    own assumption), and the true difference is the population's.
    """
    population = 1000
    gt = make_gt(100, population)
    better = match_detections(gt, detect(gt, 5, recall=0.88, jitter=0.07))
    worse = match_detections(gt, detect(gt, 5))

    def map50(m, weights):
        return np.nanmean(average_precision(m, weights, slice(0, 1))[:, 0], axis=-1)

    ones = np.ones((1, population), dtype=np.int64)
    true = map50(better, ones)[0] - map50(worse, ones)[0]
    assert 0.03 < true < 0.15  # a real difference, not a tie
    rng = np.random.default_rng(0)
    covered = 0
    for trial in range(trials):
        draws = rng.integers(0, population, images)
        unique, slot = np.unique(draws, return_inverse=True)
        a, b = better.subset(unique), worse.subset(unique)

        def resample(seed):
            # a resample of the val set's 200 draws, as multiplicities of its unique images
            picks = slot[np.random.default_rng(seed).integers(0, images, (resamples, images))]
            rows = (picks + (np.arange(resamples) * len(unique))[:, None]).ravel()
            return np.bincount(rows, minlength=resamples * len(unique)).reshape(resamples, -1)

        w = resample(trial)
        diff = map50(a, w) - map50(b, w if paired else resample(trial + 10_000))
        low, high = np.percentile(diff, [2.5, 97.5])
        covered += bool(low <= true <= high)
    return covered / trials


def test_interval_covers_the_true_difference_about_95_percent_of_the_time():
    """400 val sets of 200 images, 200 resamples each (seeded; ~3-5 s on one core).

    Measured while writing this: 0.9125 here; 0.927 over 300 val sets with 400
    resamples; 0.945 over 200 val sets of 500 images. The percentile interval
    runs slightly short at 200 images (its misses are mostly on the high side:
    AP on few images is skewed); a bias-corrected (BC) interval did no better
    (0.92), BCa little better (0.933 against 0.927 on the same 300 val sets). With 400 trials a true
    coverage of 0.92 lands in the band 0.88-0.99 with probability > 0.99. An
    unpaired bootstrap (each model resampled on its own) covered 200 of 200: it
    ignores that both models find the same images hard, so its intervals are
    too wide to see real gains.
    """
    assert 0.88 <= coverage(trials=400, images=200, resamples=200) <= 0.99


def test_full_set_equals_cocoeval_on_real_detections(trained_model):
    """The session's trained example: a weak real model's many low-scoring boxes."""
    gt = json.loads(trained_model.val_json.read_text())
    dets = json.loads(trained_model.bbox_json.read_text())
    assert ours(gt, dets) == pytest.approx(faster(gt, dets), abs=1e-6)


def _sets(*specs):
    """SetMatches for (name, gt seed, images, candidate detector kwargs) specs."""
    from promotion.decision.paired import SetMatches

    out = []
    for name, seed, images, kwargs in specs:
        gt = make_gt(seed, images=images)
        out.append(SetMatches(name=name, class_names=SetMatches.names_of(gt),
                              candidate=match_detections(gt, detect(gt, 3, **kwargs)),
                              production=match_detections(gt, detect(gt, 3))))
    return out


def test_the_pool_is_the_image_weighted_mean_of_the_sets_and_narrower_than_each():
    from promotion.decision.paired import compare_sets

    sets = _sets(("val", 2, 120, {"recall": 0.9}), ("holdout", 5, 80, {"recall": 0.9}))
    both = compare_sets(sets, resamples=300, seed=1)
    val, hold = both.sets["val"], both.sets["holdout"]
    for key in ("map50", "map"):
        mean = 0.6 * val.difference[key].estimate + 0.4 * hold.difference[key].estimate
        assert both.pooled.difference[key].estimate == pytest.approx(mean)
        assert both.pooled.sd[key] < min(val.sd[key], hold.sd[key])
    assert both.pooled.images == 200
    # each set alone is what compare_sets of that set alone says (its own seed offset aside)
    alone = compare_sets(sets[:1], resamples=300, seed=1).sets["val"]
    assert alone.difference == val.difference


def test_the_class_band_is_simultaneous_over_every_class_of_every_set():
    """The max-T band is wider than one class's own 95 % interval and no wider than
    Bonferroni's over the family (normal quantiles as the yardstick), and the Monte
    Carlo error of the pooled interval's ends is reported and small."""
    from promotion.decision.paired import compare_sets

    sets = _sets(("val", 2, 150, {"recall": 0.8}), ("holdout", 5, 150, {"recall": 0.8}))
    both = compare_sets(sets, resamples=1000, seed=0)
    family = [c for s in both.sets.values() for c in s.classes if c.distinguished]
    assert both.pooled.class_family == len(family) == 6
    critical = [(c.difference.high - c.difference.estimate) for c in family]
    # the half-width over the class's own spread: the band's multiplier, the same for all
    draws = compare_sets(sets, resamples=1000, seed=0)
    assert draws == both  # seeded: the same answer twice
    from statistics import NormalDist
    z1, zbonf = NormalDist().inv_cdf(0.975), NormalDist().inv_cdf(1 - 0.025 / 6)
    sds = []
    for s in sets:
        from promotion.decision.coco_ap import average_precision as ap
        w = bootstrap_weights(len(s.candidate.image_ids), 1000, 0 if s.name == "val" else 1)
        d = ap(s.candidate, w)[:, 0] - ap(s.production, w)[:, 0]
        sds += list(np.nanstd(d, axis=0))
    multipliers = [half / sd for half, sd in zip(critical, sds)]
    assert max(multipliers) == pytest.approx(min(multipliers), rel=1e-6)
    assert z1 < multipliers[0] < zbonf + 0.3
    assert 0 < both.pooled.difference["map50"].mc_error < 0.002


def test_a_class_the_two_models_never_tell_apart_is_not_judged():
    """The same detections on a class: every resample gives the same difference (0), so
    the class is marked undistinguished instead of printing [+0.0000, +0.0000] as certain.
    Circle identical, square with one extra confident false positive, triangle's scores
    scaled."""
    from promotion.decision.paired import SetMatches, compare_sets

    gt = make_gt(2, images=100)
    prod = detect(gt, 3)
    cand = [d if d["category_id"] == 1 else {**d, "score": d["score"] * 0.9} for d in prod]
    cand += [{"image_id": 1, "category_id": 2, "bbox": [0, 0, 5, 5], "score": 0.99}]
    one = SetMatches(name="val", class_names=SetMatches.names_of(gt),
                     candidate=match_detections(gt, cand), production=match_detections(gt, prod))
    result = compare_sets([one], resamples=200).sets["val"]
    by_name = {c.name: c for c in result.classes}
    assert by_name["circle"].distinguished is False
    assert by_name["circle"].difference.low == by_name["circle"].difference.high == 0.0
    assert by_name["square"].distinguished is True  # its extra false positive shows
    # scores scaled within a class keep its ranking: AP cannot tell, nor can the band
    assert by_name["triangle"].distinguished is False
    assert result.class_family == 1
