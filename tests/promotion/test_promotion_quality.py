"""Model-quality checks in the canary analysis (`promotion/decision/quality.py`): pure,
no server. A skewed canary (answers 200, fast, and finds nothing) is rolled
back by a quality check while its errors and latency pass; a harmless drift
of a retrain is not; the test's false-alarm rate holds at the boundary of its
minimum effect (Monte Carlo through the same `stats` code the controller runs).
"""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest

from promotion.decision import quality, stats
from promotion.decision.analysis import decide
from promotion.decision.observations import Observations, VersionWindow
from promotion.decision.policy import CanaryPolicy, QualityCheck, load_policy
from promotion.decision.state import dump_state_yaml, load_state, start_canary
from promotion.errors import PolicyError
from promotion.metrics.presets import get_preset
from promotion.metrics.prometheus import PrometheusSource
from promotion.reports.report import write_canary_report

T0 = dt.datetime(2026, 11, 25, 9, 0, tzinfo=dt.timezone.utc)
DETECTION_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100)
SCORE_BUCKETS = tuple(round(0.05 * i, 2) for i in range(1, 21))


def _cumulative(values: np.ndarray, bounds: tuple[float, ...]) -> dict[float, float]:
    hist = {float(b): float(np.sum(values <= b + 1e-12)) for b in bounds}
    hist[math.inf] = float(len(values))
    return hist


def _answers(n: int, empty_share: float, rng: np.random.Generator) -> dict[str, dict]:
    """`n` images' answers: 3-4 detections scored ~0.9, or none (score 0)."""
    empty = rng.random(n) < empty_share
    detections = np.where(empty, 0, rng.integers(3, 5, n))
    top = np.where(empty, 0.0, rng.uniform(0.8, 0.99, n))
    return {"detections_per_image": _cumulative(detections, DETECTION_BUCKETS),
            "top_score": _cumulative(top, SCORE_BUCKETS)}


def _window(weight: int, canary_empty: float, stable_empty: float,
            rng: np.random.Generator, total: int = 1000) -> Observations:
    n_c = total * weight // 100
    n_s = total - n_c
    fast = {0.01: 0.0, 0.05: None, math.inf: None}

    def latency(n: int) -> dict[float, float]:
        return {k: (float(n) if v is None else v) for k, v in fast.items()}

    return Observations(
        canary=VersionWindow(requests=n_c, errors=0, latency=latency(n_c),
                             quality=_answers(n_c, canary_empty, rng)),
        stable=VersionWindow(requests=n_s, errors=0, latency=latency(n_s),
                             quality=_answers(n_s, stable_empty, rng)),
        window_seconds=30)


def test_poor_answers_and_mean_read_the_histogram():
    hist = {0.0: 2.0, 1.0: 2.0, 2.0: 5.0, 3.0: 10.0, math.inf: 10.0}
    assert quality.poor_answers(hist, 0) == (2, 10)
    assert quality.poor_answers(hist, 2) == (5, 10)
    assert quality.mean(hist) == pytest.approx((0 * 2 + 2 * 3 + 3 * 5) / 10)
    assert quality.poor_answers({}, 0) is None and quality.mean({}) is None


def test_a_skewed_canary_is_rolled_back_by_a_quality_check_while_errors_and_latency_pass():
    rng = np.random.default_rng(7)
    policy = CanaryPolicy(min_requests=100)
    state = start_canary("shapes-detector", "v1", "v2", 10, T0)
    decision = None
    for minute in range(1, 20):
        decision = decide(policy, state, _window(10, 0.7, 0.02, rng),
                          T0 + dt.timedelta(minutes=minute))
        if decision.kind == "rollback":
            break
        state = decision.state
    assert decision is not None and (decision.kind, decision.cause) == ("rollback", "verdict")
    assert decision.reason.startswith("model quality (no_detections): canary ")
    assert "images answered with no detection, stable" in decision.reason
    checks = {c.name: c for c in decision.evidence.checks}
    assert checks["quality_no_detections"].verdict == "fail"
    assert checks["errors_vs_stable"].verdict == "pass"
    assert checks["latency_p99"].verdict != "fail"
    # the evidence carries value, threshold and statistic for the commit trailers
    record = checks["quality_no_detections"].to_dict()
    assert record["value"] > 0.5 and record["threshold"] < 0.1 and record["statistic"] > 0
    # and the mean the issue asks a verdict to name
    assert "mean detections_per_image" in record["detail"]


def test_a_harmless_drift_steps_through_every_weight_and_promotes():
    """Stable answers 8 % of images with nothing, the retrain 11 %: 1.4x, below the ratio
    margin (2x), so harmless (harm needs both margins)."""
    rng = np.random.default_rng(11)
    policy = CanaryPolicy(min_requests=100)
    state = start_canary("shapes-detector", "v1", "v2", 10, T0)
    kinds = []
    for minute in range(1, 40):
        decision = decide(policy, state, _window(state.weight, 0.11, 0.08, rng),
                          T0 + dt.timedelta(minutes=minute))
        kinds.append(decision.kind)
        state = decision.state
        if decision.kind == "promote":
            break
    assert "rollback" not in kinds and kinds[-1] == "promote", kinds


def _hist(poor: int, answers: int) -> dict[float, float]:
    return {0.0: float(poor), 1.0: float(poor), math.inf: float(answers)}


NO_DETECTION = QualityCheck(name="no_detections", signal="detections_per_image", at_most=0)


@pytest.mark.parametrize("poor, answers, stable, expected", [
    (0, 300, (0, 900), "pass"),      # bound 2.2 % <= stable's 0 % + 3 points
    (0, 100, (0, 900), "unknown"),   # bound 6.7 %: not shown yet
    (10, 100, (0, 900), "unknown"),  # worse, but the test has not spoken yet
    (10, 400, (160, 2000), "pass"),  # 2.5 % vs 8 %: bound 6.6 % <= 6.3 % + 3 points
    (48, 400, (160, 2000), "unknown"),  # 12 % vs 8 %: the difference route cannot show it
])
def test_a_quality_check_passes_a_step_only_when_the_canary_is_shown_within_the_margins(
        poor, answers, stable, expected):
    """`min_answers` answers without a rejection used to pass a step: at 10 % a canary
    failing 10 % of images where stable fails none passed with 100 answers, before the
    test could speak. Now the canary must be shown within the margins by a bound valid at
    every look: here the confidence sequences' route (no two-sample evidence yet)."""
    spec = CanaryPolicy().quality
    v = quality.judge(spec, NO_DETECTION, None, _hist(poor, answers), _hist(*stable),
                      min_answers=100)
    assert v.verdict == expected, v.detail
    assert ("not yet shown within the margins" in v.detail) == (expected != "pass")
    assert "at 95% confidence (any look)" in v.detail
    # the old rule (pass_confidence: null) passes every one of them on the count alone
    old = quality.judge(spec.model_copy(update={"pass_confidence": None}), NO_DETECTION, None,
                        _hist(poor, answers), _hist(*stable), min_answers=100)
    assert old.verdict == "pass" and "confidence" not in old.detail


def test_the_two_sample_pass_test_shows_a_drift_within_the_ratio():
    """10 % vs 8 % (1.25x, a drift inside the 2x margin): the confidence sequences cannot
    show it below 8 % + 3 points, the step's two-sample test shows it below 2x stable's.
    A canary at the margin (16 %) is not shown within it."""
    spec = CanaryPolicy().quality
    rng = np.random.default_rng(1)
    for share, expected in ((0.10, "pass"), (0.16, "unknown")):
        lam = None
        canary, stable = (0, 0), (0, 0)
        for _ in range(20):
            c, s = int(rng.binomial(100, share)), int(rng.binomial(900, 0.08))
            lam = quality.update_pass(lam, NO_DETECTION, _hist(c, 100), _hist(s, 900))
            canary, stable = (canary[0] + c, canary[1] + 100), (stable[0] + s, stable[1] + 900)
        v = quality.judge(spec, NO_DETECTION, None, _hist(*canary), _hist(*stable),
                          min_answers=100, pass_log_lr=lam)
        assert v.verdict == expected, v.detail
        assert ("shown below 2x stable's share" in v.detail) == (expected == "pass")


def test_the_margin_is_the_larger_of_the_ratio_and_the_difference():
    check = QualityCheck(name="q", signal="s", at_most=0, min_ratio=2, min_difference=0.05)
    assert quality.harmful_above(check, 0.0) == pytest.approx(0.05)
    assert quality.harmful_above(check, 0.02) == pytest.approx(0.07)
    assert quality.harmful_above(check, 0.08) == pytest.approx(0.16)
    # the anytime-valid bound: above the share seen, inside [0, 1], tighter with more answers
    assert 0.0 < quality.upper_bound(0, 100, 0.95) < quality.upper_bound(0, 50, 0.95) < 1.0
    assert quality.upper_bound(100, 100, 0.95) == 1.0
    assert 0.1 < quality.upper_bound(10, 100, 0.95) < quality.upper_bound(10, 100, 0.99)
    assert stats.wilson_interval(0, 0, 1.96) == (0.0, 1.0)


def test_a_canary_failing_one_image_in_ten_is_not_promoted_at_low_traffic():
    """The demo's traffic (40 req/s, 10 s windows, 100 answers a step) and a canary that
    answers 10 % of images with nothing where stable answers 4 % (harmful: 2.5x and 6
    points more): with the old rule a step passed on 100 answers before the evidence
    could pile up, and at 25 and 50 % each poor answer is weaker evidence. 200 rollouts
    through `decide`."""
    rng = np.random.default_rng(5)
    outcomes = {"shown": [], "count": []}
    for rule, confidence in (("shown", 0.95), ("count", None)):
        policy = load_policy({"interval": "10s", "min_requests": 100,
                              "quality": {"pass_confidence": confidence}})
        for _ in range(200):
            state = start_canary("m", "v1", "v2", 10, T0)
            for window in range(1, 200):
                total = int(rng.poisson(400))
                obs = _window(state.weight, 0.10, 0.04, rng, total=total)
                decision = decide(policy, state, obs, T0 + dt.timedelta(seconds=10 * window))
                state = decision.state
                if decision.kind in ("rollback", "promote"):
                    break
            outcomes[rule].append(decision.kind)
    assert outcomes["shown"].count("promote") == 0, outcomes["shown"].count("promote")
    # the old rule's hole, measured here (it is what the new rule closes)
    assert outcomes["count"].count("promote") > 0


def test_without_quality_data_the_checks_are_skipped_not_passed_or_failed():
    policy = CanaryPolicy(min_requests=10)
    state = start_canary("m", "v1", "v2", 10, T0)
    obs = Observations(canary=VersionWindow(requests=100, errors=0),
                       stable=VersionWindow(requests=900, errors=0), window_seconds=30)
    decision = decide(policy, state, obs, T0 + dt.timedelta(minutes=1))
    checks = {c.name: c.verdict for c in decision.evidence.checks}
    assert checks["quality_no_detections"] == "skipped"
    assert "quality_distribution" not in checks and "quality_class_mix" not in checks
    assert decision.kind == "step"


def test_quality_counts_and_statistics_survive_promotion_yaml():
    rng = np.random.default_rng(3)
    policy = CanaryPolicy(min_requests=1000)  # hold: the step's counts stay in the state
    state = start_canary("m", "v1", "v2", 10, T0)
    decision = decide(policy, state, _window(10, 0.1, 0.02, rng), T0 + dt.timedelta(minutes=1))
    assert decision.kind == "hold"
    back = load_state(dump_state_yaml(decision.state))
    assert back == decision.state
    assert set(back.statistics.quality) == {"no_detections"}
    assert set(back.pass_evidence) == {"no_detections"}
    assert back.statistics.distribution  # the answers' distribution, per bound
    assert back.canary_counts.quality["detections_per_image"][0.0] > 0


@pytest.mark.parametrize("ratio", [1.0, 2.0])
def test_the_false_alarm_rate_holds_up_to_the_minimum_effect(ratio):
    """2000 healthy rollouts of 60 windows, the canary's poor share `ratio` x
    stable's (2.0 is the null's boundary, min_ratio): the test may reject at most
    alpha of them; at 5x it rejects nearly all (power)."""
    rng = np.random.default_rng(2026)
    runs, windows, alpha, r0 = 2000, 60, 0.01, 2.0
    threshold = stats.rejection_log_threshold(alpha)

    def rejected(true_ratio: float) -> float:
        lam = np.zeros((runs, len(stats.QUALITY_GRID)))
        ever = np.zeros(runs, dtype=bool)
        p_s = 0.05
        for _ in range(windows):
            n_c, n_s = 100, 900
            e_c = rng.binomial(n_c, min(1.0, p_s * true_ratio), runs)
            e_s = rng.binomial(n_s, p_s, runs)
            lam = stats.update_relative(lam, e_c, e_s, n_c, n_s, grid=stats.QUALITY_GRID,
                                        null_ratio=r0)
            ever |= stats.log_e_value(lam) >= threshold
        return float(ever.mean())

    assert rejected(ratio) <= alpha
    assert rejected(5.0) >= 0.95


def test_quality_policy_is_validated_with_the_field_named():
    policy = load_policy({"quality": {"checks": [
        {"name": "empty", "signal": "detections_per_image", "at_most": 0, "min_ratio": 3}]}})
    assert policy.quality.checks == (QualityCheck(name="empty", signal="detections_per_image",
                                                  at_most=0, min_ratio=3),)
    assert load_policy({"quality": {"checks": []}}).quality.checks == ()
    with pytest.raises(PolicyError, match=r"promotion\.canary\.quality"):
        load_policy({"quality": {"checks": [{"name": "a", "signal": "s", "at_most": 0}] * 2}})
    with pytest.raises(PolicyError, match=r"quality\.alpha"):
        load_policy({"quality": {"alpha": 0.9}})


def test_every_preset_reads_the_model_servers_quality_histograms():
    for preset in ("model", "istio", "haproxy"):
        source = PrometheusSource("http://127.0.0.1:9", preset=preset)
        queries = source.quality_queries("shapes-detector", "v2", 30)
        assert set(queries) == set(get_preset(preset).quality) == {
            "detections_per_image", "top_score"}
        assert queries["top_score"] == (
            'sum by (le) (increase(model_top_score_bucket{model_name="shapes-detector",'
            'model_version="v2"}[30s]))')


def test_the_canary_plot_gets_a_panel_of_poor_answers_when_they_were_measured(tmp_path):
    # lazy (collection cost): pillow loads only when this runs
    from PIL import Image

    def point(t: float, poor: dict | None) -> dict:
        versions = {v: {"requests": 100, "errors": 0, "rps": 10.0, "error_rate": 0.0,
                        "p99_ms": 20.0, **({"poor": poor[v]} if poor else {})}
                    for v in ("stable", "canary")}
        return {"t": t, "weight": 10, "decision": "hold", "cause": "insufficient-evidence",
                **versions}

    measured = [point(1000.0 + 10 * i, {"stable": {"no_detections": 0.02},
                                        "canary": {"no_detections": 0.9}}) for i in range(5)]
    plain = [point(1000.0 + 10 * i, None) for i in range(5)]
    _, with_quality = write_canary_report(tmp_path / "q", "m", "v1", "v2", "rolled back", [],
                                          measured)
    _, without = write_canary_report(tmp_path / "p", "m", "v1", "v2", "promoted", [], plain)
    assert with_quality is not None and without is not None
    tall, short = Image.open(with_quality).size[1], Image.open(without).size[1]
    assert tall > short  # the fifth panel
