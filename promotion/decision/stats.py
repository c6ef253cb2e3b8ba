"""Anytime-valid sequential tests on request counts (pure numpy, no I/O).

Why not a threshold per window (Flagger, Argo Rollouts, Kayenta): each look
at a noisy windowed value is a fresh chance to fail a healthy canary, so the
false-rollback rate grows with the number of looks and nobody can state it.
An e-process (a test martingale) can be looked at after every window and
still keeps P(ever rejecting a true H0) <= alpha (Ville's inequality). That is
the stated false-rollback rate of the policy.

Four tests, all mixtures of likelihood ratios of binomial counts over a
fixed grid of alternatives (the mixture makes a test adapt to how bad the
canary is without a tuning knob; a uniform prior over the grid costs
log(len(grid)) of evidence, about 2 nats):

- **Errors vs stable** (same windows). Given the window's request counts and
  its total errors E, under H0 "the canary fails no more often than stable"
  the canary's errors are Binomial(E, pi) with pi its share of requests.
  Under "the canary fails rho times as often" the share is
  rho*n_c / (rho*n_c + n_s). The product of per-window likelihood ratios is a
  supermartingale under H0 whatever the traffic split and the stable's own
  error rate do, so the test needs no baseline estimate and survives step
  changes of the weight. Windows where one version had no requests carry no
  information and are skipped.
- **Error-rate limit**: canary errors are Binomial(n_c, p), H0 p <= p0 =
  `max_error_rate`, alternatives rho*p0.
- **Latency vs stable**: the same conditional test on *slow* requests, those
  above a bound set from the window's pooled (canary + stable) histogram:
  `max_latency_ratio` x the pooled p99. Under H0 (same latency distribution)
  requests are exchangeable, so a bound chosen from the pooled sample keeps
  the canary's share of slow requests Binomial(slow, pi). This replaces a raw
  "p99 ratio > 1.5" check, which with 100-200 samples and a heavy tail fails
  2-7 % of healthy canaries per look (measured while writing this).
- **p99 limit**: "p99 <= L" means "at most 1 % of requests slower than L";
  the canary's count above L is tested against p0 = 1 %.

The policy's alpha is split between the four (`ALPHA_SHARES`), so a healthy
canary is rolled back wrongly with probability at most alpha over the whole
rollout. The comparisons with stable get most of it; the hard limits catch
gross violations, where evidence piles up fast anyway. State is the vector
of log likelihood ratios per alternative: a few floats per test that live in
`promotion.yaml`, so the tests resume exactly from git.

Functions broadcast over leading axes so `benchmarks/canary.py` runs
thousands of simulated rollouts through the very same code.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "ALPHA_SHARES",
    "LIMIT_GRID",
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

LIMIT_GRID: tuple[float, ...] = (1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)
"""Alternatives for the limit test: canary error rate = rho x max_error_rate."""

ALPHA_SHARES: dict[str, float] = {
    "errors_vs_stable": 0.4,
    "error_rate_limit": 0.1,
    "latency_vs_stable": 0.4,
    "latency_p99": 0.1,
}
"""How the false-rollback rate alpha is divided between the tests (sums to 1)."""

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
