"""The paired answers check (`promotion/decision/answers.py`): pure, no server.

The same probe images answered by stable and canary: a label map rotated by one
or two labels swapped on a BALANCED class mix (where the class-mix check is
blind: `benchmarks/canary_quality.py`) is rolled back at the first window; a
retrain's jittered boxes and a few renamed borderline ones are not; a probe
with no boxes gives no verdict. Units are images (a crowd of one class is one
trial), tested per stable class with Holm, so two rare classes swapped among ten
are seen where the pooled share of boxes hid them. The Clopper-Pearson bound is
checked against values of the Beta quantile (scipy.stats.beta.ppf(1 - confidence,
k, n - k + 1), computed once, not a dependency).
"""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest

from promotion.decision import answers
from promotion.decision.analysis import decide
from promotion.decision.answers import Box
from promotion.decision.observations import Observations, PairedAnswers, VersionWindow
from promotion.decision.policy import AnswersCheck, CanaryPolicy, load_policy
from promotion.decision.state import start_canary
from promotion.errors import ProbeError
from promotion.metrics.probe import boxes_from_response

T0 = dt.datetime(2026, 11, 26, 9, 0, tzinfo=dt.timezone.utc)
CLASSES = ("circle", "square", "triangle")
CHECK = AnswersCheck()


def _probe(rng: np.random.Generator, images: int = 24) -> list[list[Box]]:
    """Stable's boxes on `images` probe images: 1-3 objects each, classes balanced."""
    out = []
    for _ in range(images):
        boxes = []
        for j in range(int(rng.integers(1, 4))):
            x, y = 40.0 * j + 5, float(rng.uniform(5, 80))
            boxes.append(Box(CLASSES[int(rng.integers(3))], float(rng.uniform(0.6, 0.99)),
                             x, y, x + 30, y + 30))
        out.append(boxes)
    return out


def _renamed(probe, names):
    return [[b._replace(label=names.get(b.label, b.label)) for b in img] for img in probe]


ROTATED = dict(zip(CLASSES, CLASSES[1:] + CLASSES[:1]))
SWAPPED = {"circle": "square", "square": "circle"}


def _retrain(probe, rng, renamed=0.05):
    """A harmless retrain: boxes moved by a few pixels, scores changed, a few renamed."""
    out = []
    for img in probe:
        boxes = []
        for b in img:
            dx, dy = rng.uniform(-3, 3, 2)
            label = b.label if rng.random() >= renamed else \
                CLASSES[(CLASSES.index(b.label) + 1) % 3]
            boxes.append(Box(label, min(0.99, b.score * float(rng.uniform(0.9, 1.1))),
                             b.x1 + dx, b.y1 + dy, b.x2 + dx, b.y2 + dy))
        out.append(boxes)
    return out


def test_iou_and_greedy_matching_by_score():
    a = Box("circle", 0.9, 0, 0, 10, 10)
    assert answers.iou(a, a) == 1.0
    assert answers.iou(a, Box("x", 0.9, 5, 0, 15, 10)) == pytest.approx(50 / 150)
    assert answers.iou(a, Box("x", 0.9, 20, 20, 30, 30)) == 0.0
    stable = [Box("circle", 0.9, 0, 0, 10, 10), Box("square", 0.9, 1, 0, 11, 10)]
    # The best-scoring canary box takes the stable box it overlaps most; the second
    # takes what is left if it overlaps enough, else stays alone.
    canary = [Box("square", 0.5, 0, 0, 10, 10), Box("circle", 0.95, 1, 0, 11, 10)]
    pairs = answers.match(stable, canary)
    assert [(s.label, c.label) for s, c in pairs] == [("square", "circle"), ("circle", "square")]
    assert answers.match(stable, [Box("circle", 0.9, 50, 50, 60, 60)]) == []


def test_one_object_with_a_peak_per_class_matches_by_score():
    """A CenterNet head answers one object with a peak in several class channels at the
    same cell: identical boxes, other labels, other scores. A rotated map renames each
    peak; the matching must pair peak with peak (closest score), not any equal box."""
    stable = [Box("circle", 0.9, 0, 0, 10, 10), Box("triangle", 0.55, 0, 0, 10, 10)]
    canary = _renamed([stable], ROTATED)[0]
    pairs = answers.match(stable, canary)
    assert sorted((s.label, c.label) for s, c in pairs) == [("circle", "square"),
                                                            ("triangle", "circle")]
    assert answers.compare([stable], [canary], CHECK).relabelled == 2


@pytest.mark.parametrize("k, n, confidence, expected", [
    (5, 10, 0.95, 0.2224411010081294),    # beta.ppf(0.05, 5, 6)
    (31, 32, 0.99, 0.8099144550219392),   # beta.ppf(0.01, 31, 2)
    (21, 32, 0.99, 0.43609895440712665),  # beta.ppf(0.01, 21, 12)
])
def test_lower_bound_is_clopper_pearsons(k, n, confidence, expected):
    assert answers.lower_bound(k, n, confidence) == pytest.approx(expected, abs=1e-9)


def test_lower_bound_edges():
    assert answers.lower_bound(0, 30, 0.99) == 0.0
    assert answers.lower_bound(3, 0, 0.99) == 0.0
    assert answers.lower_bound(20, 20, 0.99) == pytest.approx(0.01 ** (1 / 20))


@pytest.mark.parametrize("names, at_least", [(ROTATED, 1.0), (SWAPPED, 0.4)],
                         ids=["rotated by one", "two labels swapped"])
def test_a_wrong_label_map_fails(names, at_least):
    rng = np.random.default_rng(3)
    probe = _probe(rng)
    paired = answers.compare(probe, _renamed(probe, names), CHECK)
    assert paired.matched == sum(len(i) for i in probe)
    assert paired.relabelled / paired.matched >= at_least
    verdict, share, limit, images, detail = answers.judge(CHECK, paired)
    assert verdict == "fail" and share == 1.0 and share > limit
    assert images == paired.matched_images == len(probe)
    assert detail.startswith("images renamed: ")
    assert f"{paired.relabelled}/{paired.matched} matched boxes labelled differently" in detail


def test_harmless_retrains_pass():
    rng = np.random.default_rng(11)
    fails = 0
    for _ in range(200):
        probe = _probe(rng)
        verdict, *_ = answers.judge(CHECK, answers.compare(probe, _retrain(probe, rng), CHECK))
        fails += verdict == "fail"
    assert fails == 0


def test_boxes_below_min_score_are_left_out_on_both_sides():
    probe = [[Box("circle", 0.3, 0, 0, 10, 10)] for _ in range(20)]
    paired = answers.compare(probe, _renamed(probe, ROTATED), CHECK)
    assert (paired.matched, paired.stable_boxes, paired.canary_boxes) == (0, 0, 0)


@pytest.mark.parametrize("paired, why", [
    (PairedAnswers(images=16), "no verdict"),
    (PairedAnswers(images=16, stable_boxes=3, canary_boxes=3, matched=3, relabelled=3,
                   matched_images=3, renamed_images=3, classes={"circle": (3, 3)}),
     "no verdict"),
    (PairedAnswers.failed("the stable version ships no probe images"), "no probe"),
    (None, "not probed"),
], ids=["no boxes", "too few matched", "probe failed", "not probed"])
def test_no_boxes_no_verdict(paired, why):
    verdict, low, _, _, detail = answers.judge(CHECK, paired)
    assert verdict == "skipped" and low is None and why in detail


def test_a_crowd_image_is_one_trial():
    """Fifteen boxes of one class in one image, all renamed, and nine images where one box
    of ten is renamed: by boxes 24 of 60 (40 %, 'beyond 35 %'), by images 1 of 10."""
    crowd = [[Box("circle", 0.9, 35.0 * (j % 5), 35.0 * (j // 5), 35.0 * (j % 5) + 30,
                  35.0 * (j // 5) + 30) for j in range(15)]]
    plain = [[Box("square", 0.9, 35.0 * j, 0, 35.0 * j + 30, 30) for j in range(5)]
             for _ in range(9)]
    canary = _renamed(crowd, ROTATED) + [[b._replace(label="circle") if j == 0 else b
                                          for j, b in enumerate(img)] for img in plain]
    paired = answers.compare(crowd + plain, canary, CHECK)
    assert (paired.matched, paired.relabelled) == (60, 24)
    assert (paired.matched_images, paired.renamed_images) == (10, 1)
    assert paired.classes == {"circle": (1, 1), "square": (9, 0)}
    assert answers.judge(CHECK, paired)[0] == "pass"


TEN = tuple(f"c{i}" for i in range(10))


def _ten_class_probe(rng: np.random.Generator) -> list[list[Box]]:
    """60 probe images of ten classes, stratified: c0 and c1, the rare ones (about 5 % of
    boxes each), in 9 images each, the others in more; two to four boxes an image."""
    out = []
    for i in range(60):
        first = TEN[i % 10] if i < 50 else TEN[(i - 50) // 4 % 2] if i < 58 else TEN[i - 56]
        names = [first] + [TEN[int(rng.integers(2, 10))] for _ in range(rng.integers(1, 4))]
        out.append([Box(n, 0.9, 35.0 * j, 0, 35.0 * j + 30, 30) for j, n in enumerate(names)])
    return out


def test_two_rare_classes_swapped_among_ten_fail_by_class():
    """c0 <-> c1: 18 of about 180 matched boxes renamed (10 %, far below the margin), every
    image of c0 and of c1 renamed (100 %): Holm over the classes names them."""
    probe = _ten_class_probe(np.random.default_rng(4))
    paired = answers.compare(probe, _renamed(probe, {"c0": "c1", "c1": "c0"}), CHECK)
    assert paired.relabelled / paired.matched < 0.1
    verdict, share, _, _, detail = answers.judge(CHECK, paired)
    assert verdict == "fail" and share == 1.0
    assert detail.startswith("images renamed: c0 9/9, c1 9/9")


def test_a_class_with_too_few_probe_images_is_not_counted_in_the_family():
    """Tarone: a hypothesis that cannot reach its level with every unit renamed does not
    dilute the others (two images: 0.35^2 = 0.12, never below 0.001 / K)."""
    level = 0.001
    min_p = {"all classes": 1e-9, "common": 1e-8, "rare": 0.35 ** 2, "rarer": 0.35}
    assert answers.testable(min_p, level) == 2
    assert answers.holm({"all classes": 0.5, "common": 4e-4, "rare": 0.12, "rarer": 1.0},
                        level, answers.testable(min_p, level)) == ["common"]


def test_a_confusable_pair_within_the_margin_passes():
    """Two good models disagree on a fifth of one class's images (a confusable pair):
    under `max_share` (35 %) for the class, not a verdict."""
    probe = _ten_class_probe(np.random.default_rng(4))
    canary = [[b._replace(label="c3") if b.label == "c2" and k % 5 == 0 else b for b in img]
              for k, img in enumerate(probe)]
    paired = answers.compare(probe, canary, CHECK)
    assert 0 < paired.classes["c2"][1] / paired.classes["c2"][0] <= 0.35
    assert answers.judge(CHECK, paired)[0] == "pass"


def test_holm_and_the_exact_p_value():
    assert answers.p_value(6, 6, 0.35) == pytest.approx(0.35 ** 6)
    assert answers.p_value(0, 6, 0.35) == 1.0 and answers.p_value(1, 0, 0.35) == 1.0
    # m = 3 at 0.03: the smallest against 0.01, the next against 0.015, then stop
    assert answers.holm({"a": 0.009, "b": 0.014, "c": 0.5}, 0.03) == ["a", "b"]
    assert answers.holm({"a": 0.011, "b": 0.001, "c": 0.5}, 0.03) == ["b", "a"]
    assert answers.holm({"a": 0.02, "b": 0.02}, 0.03) == []


def test_different_image_counts_are_not_a_probe():
    probe = _probe(np.random.default_rng(1), 4)
    assert answers.compare(probe, probe[:3], CHECK).error is not None


# -- in the decision ----------------------------------------------------------------------

def _window(weight: int, paired: PairedAnswers | None, total: int = 400) -> Observations:
    n_c = total * weight // 100
    n_s = total - n_c
    fast = {0.01: 0.0, 0.05: None, math.inf: None}

    def latency(n):
        return {k: (float(n) if v is None else v) for k, v in fast.items()}

    return Observations(canary=VersionWindow(requests=n_c, latency=latency(n_c)),
                        stable=VersionWindow(requests=n_s, latency=latency(n_s)),
                        window_seconds=30, answers=paired)


def _first_decision(paired, policy=None, requests=400):
    state = start_canary("shapes-detector", "v1", "v2", 10, T0)
    policy = policy or CanaryPolicy(min_requests=20, min_latency_samples=20)
    return decide(policy, state, _window(10, paired, requests),
                  T0 + dt.timedelta(minutes=1))


def test_a_rotated_map_is_rolled_back_at_the_first_window_by_decide():
    probe = _probe(np.random.default_rng(5))
    decision = _first_decision(answers.compare(probe, _renamed(probe, ROTATED), CHECK))
    assert decision.kind == "rollback" and decision.cause == "verdict"
    assert decision.reason.startswith("answers: ") and "labelled differently" in decision.reason
    assert "circle -> square x" in decision.reason  # the reason says which names moved
    check = decision.evidence.check("answers")
    assert check is not None and check.verdict == "fail" and check.value > check.threshold


def test_the_verdict_needs_no_client_traffic():
    probe = _probe(np.random.default_rng(5))
    paired = answers.compare(probe, _renamed(probe, SWAPPED), CHECK)
    decision = _first_decision(paired, requests=0)
    assert decision.kind == "rollback"
    # Without the probe, the same empty window is a hold for lack of evidence.
    assert _first_decision(None, requests=0).kind == "hold"


def test_a_harmless_retrain_steps_and_the_check_is_in_the_evidence():
    rng = np.random.default_rng(8)
    probe = _probe(rng)
    decision = _first_decision(answers.compare(probe, _retrain(probe, rng), CHECK))
    assert decision.kind == "step"
    check = decision.evidence.check("answers")
    assert check is not None and check.verdict == "pass"


def test_no_boxes_neither_blocks_nor_passes_a_step():
    decision = _first_decision(PairedAnswers(images=16))
    assert decision.kind == "step"
    assert decision.evidence.check("answers").verdict == "skipped"


def test_the_check_can_be_switched_off_and_is_named_in_policy_errors():
    probe = _probe(np.random.default_rng(5))
    paired = answers.compare(probe, _renamed(probe, ROTATED), CHECK)
    off = load_policy({"min_requests": 20, "min_latency_samples": 20,
                       "quality": {"answers": None}})
    assert _first_decision(paired, off).kind == "step"
    with pytest.raises(ValueError, match=r"promotion.canary.quality.answers.max_share"):
        load_policy({"quality": {"answers": {"max_share": 1.5}}})


def test_boxes_from_an_oip_detection_answer():
    """The probe reads the server's JSON answer (serving/protocol.py encode_infer_response):
    `bbox` rows (class id, score, x1, y1, x2, y2), `bbox_num` per image, `labels`."""

    doc = {"model_name": "m", "model_version": "v1", "outputs": [
        {"name": "bbox", "datatype": "FP32", "shape": [3, 6],
         "data": [1, 0.9, 0, 0, 10, 10, 2, 0.8, 5, 5, 20, 20, 3, 0.7, 1, 1, 4, 4]},
        {"name": "bbox_num", "datatype": "INT32", "shape": [3], "data": [2, 0, 1]},
        {"name": "labels", "datatype": "BYTES", "shape": [3],
         "data": ["circle", "square", "triangle"]}]}
    images = boxes_from_response(doc, 3)
    assert [[b.label for b in img] for img in images] == [["circle", "square"], [], ["triangle"]]
    assert images[0][1] == Box("square", pytest.approx(0.8), 5, 5, 20, 20)
    with pytest.raises(ProbeError, match="do not fit 2 images"):
        boxes_from_response(doc, 2)
    with pytest.raises(ProbeError, match="no labels output"):
        boxes_from_response({"outputs": doc["outputs"][:2]}, 3)
