"""Anytime-valid sequential tests on request counts (pure numpy, no I/O).

Mixtures of binomial likelihood ratios over a grid of alternatives (e-processes), which
may be looked at after every window: errors and slow requests against stable's
(conditional on the window's totals), the error rate and the p99 against their limits;
the policy's one `alpha` split among every rollback test (`ALPHA_SHARES`), a family's
e-values averaged (`mean_log_e`); anytime-valid confidence sequences for passing a step
(`confidence_sequence`). Functions broadcast over leading axes for the benchmarks.
Why: docs/canary.md.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "ALPHA_SHARES",
    "confidence_sequence",
    "mean_log_e",
    "pass_levels",
    "LIMIT_GRID",
    "PASS_GRID",
    "QUALITY_GRID",
    "RELATIVE_GRID",
    "log_e_value",
    "rejection_log_threshold",
    "update_limit",
    "update_relative",
    "wilson_interval",
]

RELATIVE_GRID: tuple[float, ...] = (2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
"""Alternatives for the relative test: canary error rate = rho x stable's."""

QUALITY_GRID: tuple[float, ...] = (1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)
"""Alternatives for a model-quality check: the canary's share of poor answers =
rho x the null ratio x stable's (finer near 1: the null already has a margin)."""

PASS_GRID: tuple[float, ...] = (0.2, 0.35, 0.5, 0.65, 0.8)
"""Alternatives for passing a model-quality check: the canary's share of poor answers =
g x the harm boundary (`min_ratio` x stable's). Below 1: the test gathers evidence that
the canary is *not* harmful (`update_relative` with these as its grid)."""

LIMIT_GRID: tuple[float, ...] = (1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)
"""Alternatives for the limit test: canary error rate = rho x max_error_rate."""

ALPHA_SHARES: dict[str, float] = {
    "errors_vs_stable": 0.40,
    "error_rate_limit": 0.05,
    "latency_vs_stable": 0.15,
    "latency_p99": 0.05,
    "quality": 0.05,
    "distribution": 0.10,
    "class_mix": 0.10,
    "answers": 0.10,
}
"""How the canary's one false-rollback rate `alpha` is divided between the tests
that can roll it back (sums to 1). Errors vs stable keeps the largest share: it
is the test that must act within the fewest requests. A check that is off leaves
its share unspent (the total then overstates the rate, never understates it)."""

P99_TAIL = 0.01
"""Fraction of requests allowed above the p99 limit."""

_MAX_P = 1.0 - 1e-9


def _binomial_log_lr(x: NDArray[np.float64], n: NDArray[np.float64],
                     p0: NDArray[np.float64], p1: NDArray[np.float64]) -> NDArray[np.float64]:
    """Log of P(x | n, p1) / P(x | n, p0); 0 where n == 0."""
    p0 = np.clip(p0, 1e-12, _MAX_P)
    p1 = np.clip(p1, 1e-12, _MAX_P)
    with np.errstate(invalid="ignore"):
        out = x * (np.log(p1) - np.log(p0)) + (n - x) * (np.log1p(-p1) - np.log1p(-p0))
    return np.where(n > 0, out, 0.0)


def update_relative(log_lr: ArrayLike, canary_errors: ArrayLike, stable_errors: ArrayLike,
                    canary_requests: ArrayLike, stable_requests: ArrayLike,
                    grid: Sequence[float] = RELATIVE_GRID,
                    null_ratio: float = 1.0) -> NDArray[np.float64]:
    """Add one window's evidence that the canary fails more often than stable.

    `log_lr` has the grid as its last axis; counts broadcast against the rest.
    `null_ratio` r0 > 1 moves H0 to "the canary's rate is at most r0 x stable's"
    (a minimum effect: smaller drifts are not evidence); the alternatives are
    then rho x r0. The likelihood ratio against the boundary stays a
    supermartingale for every ratio <= r0 (the family has a monotone
    likelihood ratio in the canary's share), so the level is kept.
    """
    lam = np.asarray(log_lr, dtype=float)
    rho = np.asarray(grid, dtype=float) * null_ratio
    ec = np.asarray(canary_errors, dtype=float)[..., None]
    es = np.asarray(stable_errors, dtype=float)[..., None]
    nc = np.asarray(canary_requests, dtype=float)[..., None]
    ns = np.asarray(stable_requests, dtype=float)[..., None]
    informative = (nc > 0) & (ns > 0)
    total = np.where(informative, ec + es, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        pi0 = np.where(informative, null_ratio * nc / (null_ratio * nc + ns), 0.5)
        pi1 = np.where(informative, rho * nc / (rho * nc + ns), 0.5)
    return lam + _binomial_log_lr(np.where(informative, ec, 0.0), total, pi0, pi1)


def update_limit(log_lr: ArrayLike, canary_errors: ArrayLike, canary_requests: ArrayLike,
                 max_error_rate: float, grid: Sequence[float] = LIMIT_GRID) -> NDArray[np.float64]:
    """Add one window's evidence that the canary's error rate exceeds `max_error_rate`."""
    lam = np.asarray(log_lr, dtype=float)
    p0 = np.full(len(grid), float(max_error_rate))
    p1 = np.minimum(np.asarray(grid, dtype=float) * max_error_rate, _MAX_P)
    ec = np.asarray(canary_errors, dtype=float)[..., None]
    nc = np.asarray(canary_requests, dtype=float)[..., None]
    return lam + _binomial_log_lr(ec, nc, p0, p1)


def log_e_value(log_lr: ArrayLike) -> NDArray[np.float64] | float:
    """Log of the mixture e-value (uniform prior over the grid, last axis)."""
    lam = np.asarray(log_lr, dtype=float)
    top = np.max(lam, axis=-1)
    value = top + np.log(np.mean(np.exp(lam - top[..., None]), axis=-1))
    return float(value) if np.ndim(value) == 0 else value


def rejection_log_threshold(alpha: float, share: float = 1.0) -> float:
    """log(1/(alpha*share)): a test given `share` of alpha rejects at this log e-value."""
    return math.log(1.0 / (alpha * share))


def initial(grid: Sequence[float]) -> list[float]:
    """The log likelihood ratios before any evidence (e-value 1)."""
    return [0.0] * len(grid)


def wilson_interval(successes: int, trials: int, z: float) -> tuple[float, float]:
    """Wilson's score interval for a binomial share at `z` normal quantiles ((0, 1)
    without trials). Unlike the normal approximation it stays inside [0, 1] and is
    not empty at 0 or n successes, the usual case for rare poor answers."""
    if trials <= 0:
        return (0.0, 1.0)
    p = successes / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_log_e(log_es: Sequence[float]) -> float:
    """Log of the average of e-values given as logs (0 for none: e-value 1).

    Vovk & Wang (2021, "E-values: calibration, combination and applications"):
    the average of e-values is an e-value whatever their dependence, and the
    average of e-processes on one filtration is an e-process, so a family of
    tests judged by its mean keeps its level under continuous monitoring."""
    if not log_es:
        return 0.0
    top = max(log_es)
    if math.isinf(top):
        return top
    return top + math.log(sum(math.exp(v - top) for v in log_es) / len(log_es))


CANARY_MISS_SHARE = 0.8
"""Of a pass rule's miss rate (1 - `quality.pass_confidence`), the part the canary's own
confidence sequence gets; stable's gets the rest. Stable has most of the traffic, so its
bound is tight at a small miss rate, and the canary's, which sets how long a step waits,
gets the most (a tenth fewer canary answers to pass than an even split)."""


def pass_levels(confidence: float) -> tuple[float, float]:
    """(canary's, stable's) confidence levels of a pass rule at `confidence` in all: their
    miss rates add up to 1 - confidence (a union bound)."""
    miss = 1.0 - confidence
    return 1.0 - miss * CANARY_MISS_SHARE, 1.0 - miss * (1.0 - CANARY_MISS_SHARE)


CS_PRIOR = (0.5, 0.5)
"""The beta mixing distribution of `confidence_sequence` (Jeffreys')."""


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def confidence_sequence(successes: float, trials: float, confidence: float) -> tuple[float, float]:
    """An anytime-valid confidence interval for a binomial share: (low, high).

    The set of shares p whose beta-binomial mixture martingale (a Beta prior
    `CS_PRIOR` over the alternatives, divided by the likelihood under p) is still
    below 1 / (1 - confidence). Under p that mixture is a nonnegative martingale,
    so by Ville's inequality the set misses the true share at *any* of the
    looks with probability at most 1 - confidence (Robbins 1970; Howard, Ramdas,
    McAuliffe & Sekhon 2021, "Time-uniform, nonparametric, nonasymptotic
    confidence sequences"): a rule that passes once the interval is within a
    margin may look after every window. Counts are per unit (an image, a
    request); (0, 1) without trials. Wider than a fixed-n interval by the price
    of looking: 40 of 400 at 95 % gives 5.5 to 16.1 %, where Wilson's interval,
    valid at one look, gives 7.4 to 13.3 %."""
    n = max(0.0, float(trials))
    k = min(max(0.0, float(successes)), n)
    if n <= 0:
        return (0.0, 1.0)
    a, b = CS_PRIOR
    # log M(p) = log B(a+k, b+n-k) - log B(a, b) - k log p - (n-k) log(1-p): the beta
    # functions do not depend on p, so they move to the limit once.
    limit = math.log(1.0 / (1.0 - confidence)) - _log_beta(a + k, b + n - k) + _log_beta(a, b)
    centre = k / n

    def inside(p: float) -> bool:
        p = min(max(p, 1e-15), 1.0 - 1e-15)
        return -k * math.log(p) - (n - k) * math.log1p(-p) < limit

    def edge(outside: float, within: float) -> float:
        for _ in range(50):
            mid = (outside + within) / 2
            if inside(mid):
                within = mid
            else:
                outside = mid
        return within

    low = 0.0 if inside(0.0) else edge(0.0, centre)
    high = 1.0 if inside(1.0) else edge(1.0, centre)
    return (low, high)
