"""The class-mix check (`promotion/decision/class_mix.py`): pure, no server. A label map
rotated by one or two labels swapped (every answer 200, fast, confident and
wrong) is rolled back by it while every other check passes; a retrain's small
shift of the class shares is promoted; the per class and direction test keeps
its level at the boundary of its margin and with crowd images, where counting
detections did not (Monte Carlo through the same code). Counts are per image:
the images whose answer names each class (`model_class_images_total`).
"""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest

from promotion.decision import class_mix, stats
from promotion.decision.analysis import decide
from promotion.decision.observations import Observations, VersionWindow
from promotion.decision.policy import CanaryPolicy, QualitySpec, load_policy
from promotion.decision.state import dump_state_yaml, load_state, start_canary

T0 = dt.datetime(2026, 11, 25, 9, 0, tzinfo=dt.timezone.utc)
CLASSES = ("car", "person", "bicycle")
SKEWED = (0.6, 0.3, 0.1)  # most real data sets: one class dominates


def _answers(n_images: int, mix: tuple[float, ...], rng: np.random.Generator,
             per_image: float = 2.5, crowd: float = 0.0) -> tuple[dict[str, float], int, int]:
    """(images naming each class, detections of each class, images without any) for
    n_images answers: Poisson(per_image) objects an image, or a crowd of 15 of one class."""
    crowded = rng.random(n_images) < crowd
    counts = np.where(crowded, 15, rng.poisson(per_image, n_images))
    image = np.repeat(np.arange(n_images), counts)
    cls = np.where(crowded[image], rng.choice(len(mix), n_images, p=mix)[image],
                   rng.choice(len(mix), len(image), p=mix))
    pairs = np.unique(image * len(mix) + cls)
    images = np.bincount(pairs % len(mix), minlength=len(mix))
    boxes = np.bincount(cls, minlength=len(mix))
    return ({name: float(c) for name, c in zip(CLASSES, images)} | {"other": 0.0},
            {name: float(c) for name, c in zip(CLASSES, boxes)},
            int(np.sum(counts == 0)))


def _version(n: int, mix: tuple[float, ...], rng: np.random.Generator) -> VersionWindow:
    fast = {0.01: 0.0, 0.05: float(n), math.inf: float(n)}
    classes, _, empty = _answers(n, mix, rng)
    return VersionWindow(requests=n, latency=fast, classes=classes, quality={
        "detections_per_image": {0.0: float(empty), 1.0: float(empty), math.inf: float(n)}})


def _window(weight: int, canary_mix: tuple[float, ...], stable_mix: tuple[float, ...],
            rng: np.random.Generator, total: int = 400) -> Observations:
    n_c = total * weight // 100
    return Observations(canary=_version(n_c, canary_mix, rng),
                        stable=_version(total - n_c, stable_mix, rng), window_seconds=30)


def _rollout(canary_mix, stable_mix=SKEWED, seed=7, windows=60, policy=None):
    rng = np.random.default_rng(seed)
    policy = policy or CanaryPolicy(min_requests=100)
    state = start_canary("detector", "v1", "v2", 10, T0)
    decisions = []
    for minute in range(1, windows + 1):
        weight = state.weight
        decision = decide(policy, state, _window(weight, canary_mix, stable_mix, rng),
                          T0 + dt.timedelta(minutes=minute))
        decisions.append((weight, decision))
        if decision.kind in ("rollback", "promote"):
            break
        state = decision.state
    return decisions


@pytest.mark.parametrize("name,canary_mix", [
    ("rotated by one", (0.1, 0.6, 0.3)),      # each detection named as its neighbour
    ("two labels swapped", (0.3, 0.6, 0.1)),  # car <-> person
])
def test_a_wrong_label_map_is_rolled_back_by_the_class_mix_at_its_first_step(name, canary_mix):
    decisions = _rollout(canary_mix)
    weight, last = decisions[-1]
    assert (last.kind, last.cause, weight) == ("rollback", "verdict", 10), (name, last.reason)
    assert "model quality (class_mix)" in last.reason and "car" in last.reason
    check = last.evidence.check("quality_class_mix")
    assert check is not None and check.verdict == "fail"
    assert check.statistic is not None and check.threshold is not None
    assert check.statistic >= check.threshold
    # every other check is content: the answers are 200, fast and confident
    assert {c.name for c in last.evidence.checks if c.verdict == "fail"} == {"quality_class_mix"}
    # the trailer carries each class's shares, the statistic and the threshold
    trailer = last.trailers()["Mlops-Evidence"]
    assert "car" in trailer and "rejects at log e" in trailer and '"statistic"' in trailer


def test_a_retrains_small_shift_of_the_class_shares_is_promoted():
    decisions = _rollout((0.57, 0.32, 0.11), windows=200)  # 3 points from car to the rest
    assert decisions[-1][1].kind == "promote", decisions[-1][1].reason
    assert all(d.kind != "rollback" for _, d in decisions)


def test_the_same_mix_is_promoted_and_the_check_passes_each_step():
    decisions = _rollout(SKEWED, windows=200)
    steps = [d for _, d in decisions if d.kind in ("step", "promote")]
    assert [d.kind for d in steps] == ["step", "step", "step", "promote"]
    for d in steps[:-1]:
        check = d.evidence.check("quality_class_mix")
        assert check is not None and check.verdict == "pass" and check.samples >= 100


def test_off_and_unmeasured_mean_no_check():
    off = CanaryPolicy(min_requests=100, quality=QualitySpec(class_mix=None))
    decisions = _rollout((0.1, 0.6, 0.3), policy=off, windows=200)
    assert decisions[-1][1].kind == "promote"  # nothing else sees a rotated label map
    assert decisions[-1][1].evidence.check("quality_class_mix") is None
    assert load_policy({"quality": {"class_mix": None}}).quality.class_mix is None
    assert load_policy({"quality": {"class_mix": {"min_ratio": 1.5}}}).quality.class_mix \
        .min_ratio == 1.5


def test_the_tests_state_survives_promotion_yaml():
    decisions = _rollout(SKEWED, windows=1)
    state = decisions[-1][1].state
    assert state.statistics.class_mix and state.canary_counts.classes
    again = load_state(dump_state_yaml(state), "promotion.yaml")
    assert again.statistics.class_mix == state.statistics.class_mix
    assert again.canary_counts.classes == state.canary_counts.classes


def test_false_rollbacks_at_the_margin_stay_below_the_stated_rate():
    """Monte Carlo at the boundary of the null: the canary names one class in exactly
    `min_ratio` x as many of its images as stable, looked at after every window for 40
    windows; the family (every class and direction, averaged) at its share of alpha."""
    spec = QualitySpec()
    assert spec.class_mix is not None
    rng = np.random.default_rng(11)
    r0 = spec.class_mix.min_ratio
    stable = np.array([0.5, 0.3, 0.2])
    canary = np.array([0.5, 0.3, 0.2 * r0])
    runs, fired = 200, 0
    for _ in range(runs):
        lam = None
        for _ in range(40):
            c, s = _presence(rng, 60, canary), _presence(rng, 540, stable)
            lam = class_mix.update(lam, spec, c, s, 60, 540)
            if stats.mean_log_e([float(stats.log_e_value(v)) for v in lam.values()]) >= \
                    class_mix.threshold(0.01):
                fired += 1
                break
    assert fired / runs <= 0.01 * stats.ALPHA_SHARES["class_mix"] + 0.01, fired


def _presence(rng, n, shares):
    """Images naming each class, each image on its own (independent per class)."""
    return {name: float(rng.binomial(n, p)) for name, p in zip(CLASSES, shares)}


def test_crowd_images_do_not_fool_the_per_image_count():
    """Identical models, a 60/30/10 mix, 15 % of images a crowd of 15 objects of one class.
    Counted by detections (the old unit), the same test is overconfident and fires again
    and again; counted by images, it keeps its level."""
    spec = QualitySpec()
    rng = np.random.default_rng(5)
    runs, windows = 60, 30
    fired = {"images": 0, "detections": 0}
    for _ in range(runs):
        lam: dict[str, dict] = {"images": {}, "detections": {}}
        done = set()
        for _ in range(windows):
            c = _answers(40, SKEWED, rng, crowd=0.15)
            s = _answers(360, SKEWED, rng, crowd=0.15)
            for unit, (xc, xs, nc, ns) in {
                    "images": (c[0], s[0], 40, 360),
                    "detections": (c[1], s[1], sum(c[1].values()), sum(s[1].values()))}.items():
                lam[unit] = class_mix.update(lam[unit], spec, xc, xs, nc, ns)
                if unit not in done and stats.mean_log_e(
                        [float(stats.log_e_value(v)) for v in lam[unit].values()]) >= \
                        class_mix.threshold(0.01):
                    fired[unit] += 1
                    done.add(unit)
    assert fired["images"] <= 1, fired
    # what the detection count did: 6 of 60 runs (10 %) where 0.1 % is stated
    assert fired["detections"] >= 4, fired
