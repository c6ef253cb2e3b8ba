"""Anytime-valid sequential tests on request counts (pure numpy, no I/O).

Why not a threshold per window (Flagger, Argo Rollouts, Kayenta): each look
at a noisy windowed value is a fresh chance to fail a healthy canary, so the
false-rollback rate grows with the number of looks and nobody can state it.
An e-process (a test martingale) can be looked at after every window and
still keeps P(ever rejecting a true H0) <= alpha (Ville's inequality). That is
the stated false-rollback rate of the policy.

Two tests, both mixtures of likelihood ratios of binomial counts over a fixed
grid of alternatives (the mixture makes the test adapt to how bad the canary
is without a tuning knob; a uniform prior over the grid costs log(len(grid))
of evidence, about 2 nats):

- **Relative** (canary vs stable, same windows). Given the window's request
  counts and its total errors E, under H0 "the canary fails no more often than
  stable" the canary's errors are Binomial(E, pi) with pi its share of
  requests. Under "the canary fails rho times as often" the share is
  rho*n_c / (rho*n_c + n_s). The product of per-window likelihood ratios is a
  supermartingale under H0 whatever the traffic split and the stable's own
  error rate do, so the test needs no baseline estimate and survives step
  changes of the weight. Windows where one version had no requests carry no
  information and are skipped.
- **Limit** (canary vs the policy's hard `max_error_rate` p0). Canary errors
  are Binomial(n_c, p) with H0 p <= p0 and alternatives rho*p0.

The policy's alpha is split between the two (alpha/2 each), so a canary is
rolled back wrongly with probability at most alpha over the whole rollout.
State is the vector of log likelihood ratios per alternative: a few floats
that live in `promotion.yaml`, so the test resumes exactly from git.

Functions broadcast over leading axes so `benchmarks/canary.py` runs
thousands of simulated rollouts through the very same code.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "LIMIT_GRID",
    "RELATIVE_GRID",
    "log_e_value",
    "rejection_log_threshold",
    "update_limit",
    "update_relative",
]

RELATIVE_GRID: tuple[float, ...] = (2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
"""Alternatives for the relative test: canary error rate = rho x stable's."""

LIMIT_GRID: tuple[float, ...] = (1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)
"""Alternatives for the limit test: canary error rate = rho x max_error_rate."""

_MAX_P = 1.0 - 1e-9


def _binomial_log_lr(x: NDArray[np.float64], n: NDArray[np.float64],
                     p0: NDArray[np.float64], p1: NDArray[np.float64]) -> NDArray[np.float64]:
    """log of P(x | n, p1) / P(x | n, p0); 0 where n == 0."""
    p0 = np.clip(p0, 1e-12, _MAX_P)
    p1 = np.clip(p1, 1e-12, _MAX_P)
    with np.errstate(invalid="ignore"):
        out = x * (np.log(p1) - np.log(p0)) + (n - x) * (np.log1p(-p1) - np.log1p(-p0))
    return np.where(n > 0, out, 0.0)


def update_relative(log_lr: ArrayLike, canary_errors: ArrayLike, stable_errors: ArrayLike,
                    canary_requests: ArrayLike, stable_requests: ArrayLike,
                    grid: Sequence[float] = RELATIVE_GRID) -> NDArray[np.float64]:
    """Add one window's evidence that the canary fails more often than stable.

    `log_lr` has the grid as its last axis; counts broadcast against the rest.
    """
    lam = np.asarray(log_lr, dtype=float)
    rho = np.asarray(grid, dtype=float)
    ec = np.asarray(canary_errors, dtype=float)[..., None]
    es = np.asarray(stable_errors, dtype=float)[..., None]
    nc = np.asarray(canary_requests, dtype=float)[..., None]
    ns = np.asarray(stable_requests, dtype=float)[..., None]
    informative = (nc > 0) & (ns > 0)
    total = np.where(informative, ec + es, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        pi0 = np.where(informative, nc / (nc + ns), 0.5)
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
    """log of the mixture e-value (uniform prior over the grid, last axis)."""
    lam = np.asarray(log_lr, dtype=float)
    top = np.max(lam, axis=-1)
    value = top + np.log(np.mean(np.exp(lam - top[..., None]), axis=-1))
    return float(value) if np.ndim(value) == 0 else value


def rejection_log_threshold(alpha: float, tests: int = 2) -> float:
    """log(tests/alpha): each of `tests` e-processes gets alpha/tests (Bonferroni)."""
    return math.log(tests / alpha)


def initial(grid: Sequence[float]) -> list[float]:
    """The log likelihood ratios before any evidence (e-value 1)."""
    return [0.0] * len(grid)
