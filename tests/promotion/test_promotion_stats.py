"""The sequential tests: exact martingale property, stated error rate, power.

The simulations use a fixed seed, so they are deterministic checks of the
statistics (not timing tests): a healthy canary is rejected at most alpha/2 of
the time by each test however many windows are looked at; a bad one quickly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from promotion.decision import stats
from promotion.decision.observations import count_above, histogram_quantile, merge_histograms


def binom_logpmf(x: int, n: int, p: float) -> float:
    return (math.lgamma(n + 1) - math.lgamma(x + 1) - math.lgamma(n - x + 1)
            + x * math.log(p) + (n - x) * math.log1p(-p))


@pytest.mark.parametrize("errors,nc,ns", [(1, 10, 90), (5, 25, 75), (12, 50, 50), (3, 1, 999)])
def test_relative_update_is_a_fair_bet_under_h0(errors: int, nc: int, ns: int) -> None:
    """E[exp(increment)] == 1 exactly when the canary's error share is its request share."""
    pi = nc / (nc + ns)
    expectation = np.zeros(len(stats.RELATIVE_GRID))
    for x in range(errors + 1):
        inc = stats.update_relative(stats.initial(stats.RELATIVE_GRID), x, errors - x, nc, ns)
        expectation += np.exp(binom_logpmf(x, errors, pi) + inc)
    assert np.allclose(expectation, 1.0)


@pytest.mark.parametrize("n,p0", [(10, 0.01), (200, 0.01), (50, 0.05)])
def test_limit_update_is_a_fair_bet_at_the_limit(n: int, p0: float) -> None:
    expectation = np.zeros(len(stats.LIMIT_GRID))
    for x in range(n + 1):
        inc = stats.update_limit(stats.initial(stats.LIMIT_GRID), x, n, p0)
        expectation += np.exp(binom_logpmf(x, n, p0) + inc)
    assert np.allclose(expectation, 1.0)


def test_alpha_shares_add_up_to_alpha() -> None:
    """One budget for the whole canary: every test that can roll it back has a share."""
    assert sum(stats.ALPHA_SHARES.values()) == pytest.approx(1.0)
    assert set(stats.ALPHA_SHARES) == {"errors_vs_stable", "error_rate_limit",
                                       "latency_vs_stable", "latency_p99", "quality",
                                       "distribution", "class_mix", "answers"}
    assert stats.rejection_log_threshold(0.01, 0.5) == pytest.approx(math.log(200))


def test_the_mean_of_e_values() -> None:
    assert stats.mean_log_e([]) == 0.0
    assert stats.mean_log_e([math.log(4), math.log(2)]) == pytest.approx(math.log(3))
    assert stats.mean_log_e([800.0, 0.0]) == pytest.approx(800.0 - math.log(2))  # no overflow


def test_the_confidence_sequence_holds_at_every_look() -> None:
    """400 runs, 100 looks of 20 trials each at p = 0.1: the anytime-valid sequence at 95 %
    misses the truth at *some* look (every fifth checked) in at most 5 % of runs; Wilson's
    interval, valid at one look, misses it at some look in far more (what a pass rule
    looked at every window must not use)."""
    rng = np.random.default_rng(21)
    runs, looks, p = 400, 100, 0.1
    k = np.cumsum(rng.binomial(20, p, (runs, looks)), axis=1)
    missed_cs = missed_wilson = 0
    for row in k:
        n = 20 * np.arange(1, looks + 1)
        cs = [stats.confidence_sequence(int(x), int(m), 0.95) for x, m in zip(row[::5], n[::5])]
        missed_cs += any(not lo <= p <= hi for lo, hi in cs)
        wilson = [stats.wilson_interval(int(x), int(m), 1.96) for x, m in zip(row, n)]
        missed_wilson += any(not lo <= p <= hi for lo, hi in wilson)
    assert missed_cs / runs <= 0.05
    assert missed_wilson / runs >= 0.2


def test_the_confidence_sequence_edges() -> None:
    assert stats.confidence_sequence(0, 0, 0.95) == (0.0, 1.0)
    low, high = stats.confidence_sequence(0, 200, 0.95)
    assert low == 0.0 and 0 < high < 0.05
    low, high = stats.confidence_sequence(200, 200, 0.95)
    assert high == 1.0 and 0.95 < low < 1
    low, high = stats.confidence_sequence(40, 400, 0.95)
    assert low < 0.1 < high and high - low > 0.09  # wider than a one-look interval
    assert stats.pass_levels(0.95) == pytest.approx((0.96, 0.99))


@pytest.mark.parametrize("ratio, share", [(2.0, 0.1), (2.0, 0.02), (1.5, 0.3)])
def test_the_pass_update_is_a_fair_bet_at_the_harm_boundary(ratio: float, share: float) -> None:
    """update_relative pointed the other way (alternatives below the null, PASS_GRID): at
    the harm boundary (the canary's share `ratio` x stable's) E[exp(increment)] == 1."""
    nc, ns, total = 30, 270, 12
    pi = ratio * nc / (ratio * nc + ns)
    expectation = np.zeros(len(stats.PASS_GRID))
    for x in range(total + 1):
        inc = stats.update_relative(stats.initial(stats.PASS_GRID), x, total - x, nc, ns,
                                    grid=stats.PASS_GRID, null_ratio=ratio)
        expectation += np.exp(binom_logpmf(x, total, pi) + inc)
    assert np.allclose(expectation, 1.0)


def test_windows_without_both_versions_carry_no_evidence() -> None:
    start = stats.initial(stats.RELATIVE_GRID)
    assert list(stats.update_relative(start, 5, 0, 100, 0)) == start
    assert list(stats.update_relative(start, 0, 5, 0, 100)) == start
    assert list(stats.update_relative(start, 0, 0, 100, 100)) == start
    assert stats.log_e_value(start) == pytest.approx(0.0)


def test_vectorised_and_scalar_updates_agree() -> None:
    rng = np.random.default_rng(3)
    nc, ns = rng.poisson(50, 20), rng.poisson(450, 20)
    ec, es = rng.binomial(nc, 0.05), rng.binomial(ns, 0.01)
    together = stats.update_relative(np.zeros((20, len(stats.RELATIVE_GRID))), ec, es, nc, ns)
    for i in range(20):
        alone = stats.update_relative(stats.initial(stats.RELATIVE_GRID), ec[i], es[i], nc[i],
                                      ns[i])
        assert np.allclose(alone, together[i])


def simulate(p_canary: float, p_stable: float, runs: int = 3000, windows: int = 300,
             seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """Fraction of runs rejected by each test, and canary requests at rejection."""
    rng = np.random.default_rng(seed)
    weights = np.repeat([0.1, 0.25, 0.5, 0.9], windows // 4)  # the split moves, as in a rollout
    rel = np.zeros((runs, len(stats.RELATIVE_GRID)))
    lim = np.zeros((runs, len(stats.LIMIT_GRID)))
    rel_threshold = stats.rejection_log_threshold(0.01, stats.ALPHA_SHARES["errors_vs_stable"])
    lim_threshold = stats.rejection_log_threshold(0.01, stats.ALPHA_SHARES["error_rate_limit"])
    rejected_at = np.full(runs, -1)
    served = np.zeros(runs)
    requests_at = np.full(runs, np.nan)
    for w in weights:
        nc = rng.poisson(100 * w, runs)
        ns = rng.poisson(100 * (1 - w), runs)
        ec, es = rng.binomial(nc, p_canary), rng.binomial(ns, p_stable)
        rel = stats.update_relative(rel, ec, es, nc, ns)
        lim = stats.update_limit(lim, ec, nc, 0.01)
        served += nc
        hit = ((stats.log_e_value(rel) >= rel_threshold)
               | (stats.log_e_value(lim) >= lim_threshold))
        new = hit & (rejected_at < 0)
        rejected_at[new] = 1
        requests_at[new] = served[new]
    return rejected_at > 0, requests_at


def test_healthy_canaries_are_rarely_rolled_back() -> None:
    """alpha = 1 % (half of it for these two tests): 300 looks, still under 0.5 % rejected."""
    rejected, _ = simulate(0.002, 0.002)
    assert rejected.mean() <= 0.005


def test_a_canary_better_than_stable_is_never_rolled_back_by_the_comparison() -> None:
    rejected, _ = simulate(0.001, 0.005)
    assert rejected.mean() <= 0.005


def test_a_bad_canary_is_stopped_after_few_requests() -> None:
    """5 % errors against 0.1 %: every run rejected, most within a couple of hundred requests."""
    rejected, requests_at = simulate(0.05, 0.001, runs=2000, windows=100)
    assert rejected.all()
    assert np.percentile(requests_at, 90) <= 250


def test_histogram_quantile_interpolates_like_promql() -> None:
    hist = {0.1: 50.0, 0.2: 90.0, 0.4: 100.0, math.inf: 100.0}
    assert histogram_quantile(0.5, hist) == pytest.approx(0.1)
    assert histogram_quantile(0.7, hist) == pytest.approx(0.15)
    assert histogram_quantile(0.99, hist) == pytest.approx(0.38)
    # In the +Inf bucket: the highest finite bound (a lower bound on the truth).
    assert histogram_quantile(0.99, {0.1: 10.0, math.inf: 100.0}) == pytest.approx(0.1)
    assert histogram_quantile(0.99, {}) is None
    assert histogram_quantile(0.99, {0.1: 0.0, math.inf: 0.0}) is None


def test_merge_histograms_adds_bucketwise() -> None:
    assert merge_histograms({0.1: 1, math.inf: 2}, {0.1: 3, 0.2: 4, math.inf: 5}) == {
        0.1: 4.0, 0.2: 4.0, math.inf: 7.0}


def test_count_above_rounds_the_bound_up_to_a_bucket_edge() -> None:
    hist = {0.1: 90.0, 0.25: 97.0, 0.5: 99.0, math.inf: 100.0}
    assert count_above(hist, 0.25) == (3, 100)
    assert count_above(hist, 0.2) == (3, 100)  # edge 0.25: slow undercounted, conservative
    assert count_above(hist, 0.6) is None  # no finite edge that high
    assert count_above({}, 0.1) is None
