"""The class-mix check (`promotion/decision/class_mix.py`): pure, no server. A label map
rotated by one or two labels swapped (every answer 200, fast, confident and
wrong) is rolled back by it while every other check passes; a retrain's small
shift of the class shares is promoted; the per class and direction test keeps
its level at the boundary of its margin (Monte Carlo through the same code).
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


def _classes(n_images: int, mix: tuple[float, ...], rng: np.random.Generator,
             per_image: float = 2.5) -> dict[str, float]:
    counts = rng.multinomial(rng.poisson(n_images * per_image), mix)
    return {name: float(c) for name, c in zip(CLASSES, counts)} | {"other": 0.0}


def _window(weight: int, canary_mix: tuple[float, ...], stable_mix: tuple[float, ...],
            rng: np.random.Generator, total: int = 400) -> Observations:
    n_c = total * weight // 100
    n_s = total - n_c
    fast = {0.01: 0.0, 0.05: None, math.inf: None}

    def latency(n: int) -> dict[float, float]:
        return {k: (float(n) if v is None else v) for k, v in fast.items()}

    return Observations(
        canary=VersionWindow(requests=n_c, latency=latency(n_c),
                             classes=_classes(n_c, canary_mix, rng)),
        stable=VersionWindow(requests=n_s, latency=latency(n_s),
                             classes=_classes(n_s, stable_mix, rng)),
        window_seconds=30)


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
    """Monte Carlo at the boundary of the null: the canary's share of one class is
    exactly `min_ratio` x stable's, looked at after every window for an hour."""
    spec = QualitySpec()
    assert spec.class_mix is not None
    rng = np.random.default_rng(11)
    r0 = spec.class_mix.min_ratio
    stable = np.array([0.5, 0.3, 0.2])
    canary = stable.copy()
    canary[2] *= r0
    canary[0] -= canary[2] - stable[2]
    runs, fired = 100, 0
    for _ in range(runs):
        lam = None
        for _ in range(40):
            lam = class_mix.update(lam, spec, _mix_counts(rng, 60, canary),
                                   _mix_counts(rng, 540, stable))
            # the test alone, without the margin in share points, must keep its level
            if max(float(stats.log_e_value(v)) for v in lam.values()) >= \
                    class_mix.threshold(spec, 3):
                fired += 1
                break
    # the stated rate of the whole check is its share of quality.alpha
    assert fired / runs <= spec.alpha / spec.test_count + 0.01, fired


def _mix_counts(rng, n, mix):
    counts = rng.multinomial(rng.poisson(n * 2.5), mix)
    return {name: float(c) for name, c in zip(CLASSES, counts)}
