"""The canary's checks: each a pure function of (policy, state, window) -> its evidence.

`analysis.decide` counts a window into the step's state (`analysis.count_window`)
and then walks `CHECKS` in order, so the evidence of a commit lists its checks
in that order. A check returns what it made: one `Check` as a rule, several
(one per model-quality check) or none when it does not apply (no latency
histogram, no class mix in the policy, no probe in this window). Its `verdict`
is the whole vote: any `fail` rolls back, any `unknown` holds, all `pass` or
`skipped` steps. The state a check reads is the one after the window is
counted: the step's totals and the sequential tests already include it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict

from promotion.decision import answers, class_mix, distribution, quality, stats
from promotion.decision.observations import Histogram, Observations, histogram_quantile
from promotion.decision.policy import CanaryPolicy, QualityCheck
from promotion.decision.state import CanaryState, Counts

__all__ = [
    "CHECKS",
    "TRAFFIC_ALPHA",
    "Check",
    "CheckRule",
    "answers_check",
    "class_mix_check",
    "distribution_check",
    "error_rate_limit",
    "errors_vs_stable",
    "images_answered",
    "latency_p99",
    "latency_vs_stable",
    "model_quality",
    "requests",
    "traffic",
]

TRAFFIC_ALPHA = 1e-3
"""A window's traffic share is called off only when chance explains it with
probability below this (Chernoff bound on the binomial tail). Being off only
holds the window, so a per-window level is enough."""

Verdict = Literal["pass", "fail", "unknown", "skipped"]


class Check(BaseModel):
    """One analysed value next to its threshold."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    verdict: Verdict
    value: float | None = None
    threshold: float | None = None
    samples: int | None = None
    statistic: float | None = None
    """Sequential tests: log of the e-value (rejects at the threshold in `detail`).
    Traffic: the Chernoff bound on the chance of a share this far off."""
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The check without empty fields, floats rounded for humans."""
        out: dict[str, Any] = {"name": self.name, "verdict": self.verdict}
        for key in ("value", "threshold", "samples", "statistic"):
            val = getattr(self, key)
            if val is not None:
                out[key] = round(val, 6) if isinstance(val, float) else val
        if self.detail:
            out["detail"] = self.detail
        return out


CheckRule = Callable[[CanaryPolicy, CanaryState, Observations], tuple[Check, ...]]
"""A check: (policy, state with the window counted, the window) -> the checks it made."""

_AT_100 = "stable serves no traffic at 100%"


def _kl(share: float, expected: float) -> float:
    """Bernoulli KL divergence KL(share || expected), the Chernoff exponent."""
    def term(a: float, b: float) -> float:
        if a == 0:
            return 0.0
        if b == 0:
            return math.inf
        return a * math.log(a / b)
    return term(share, expected) + term(1 - share, 1 - expected)


def _chance(n: int, share: float, expected: float) -> float:
    """Upper bound on P(a share this far from `expected` in n requests | expected)."""
    kl = _kl(share, expected)
    return 0.0 if math.isinf(kl) else math.exp(-n * kl)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _rate(counts: Counts) -> float | None:
    return counts.errors / counts.requests if counts.requests else None


def _e_value(policy: CanaryPolicy, name: str, log_lr: Any) -> tuple[float, float, bool]:
    """A sequential test's log e-value, its rejection threshold and whether it rejects."""
    threshold = stats.rejection_log_threshold(policy.alpha, stats.ALPHA_SHARES[name])
    value = float(stats.log_e_value(log_lr))
    return value, threshold, value >= threshold


def images_answered(hists: dict[str, Histogram]) -> float:
    """Images a version answered, from its per-image histograms (0: not measured)."""
    for signal in ("detections_per_image", "top_score"):
        hist = hists.get(signal)
        if hist:
            return float(max(hist.values()))
    return 0.0


def traffic(policy: CanaryPolicy, state: CanaryState, obs: Observations) -> tuple[Check, ...]:
    """The window's canary share against its weight: `fail` when it is off beyond the
    tolerance and beyond chance (the traffic has not moved yet). None without requests."""
    share = obs.observed_share
    if share is None:
        return ()
    expected = state.weight / 100.0
    tolerance = policy.traffic_tolerance / 100.0
    chance = _chance(obs.total_requests, share, expected)
    shifted = abs(share - expected) <= tolerance or chance >= TRAFFIC_ALPHA
    return (Check(name="traffic", verdict="pass" if shifted else "fail",
                  value=round(share * 100, 4), threshold=float(state.weight),
                  samples=obs.total_requests, statistic=chance,
                  detail=f"observed canary share vs weight, tolerance "
                         f"{policy.traffic_tolerance:g} points"),)


def errors_vs_stable(policy: CanaryPolicy, state: CanaryState,
                     obs: Observations) -> tuple[Check, ...]:
    """The canary's share of errors against stable's (mixture SPRT): `fail` when it rejects."""
    canary = state.canary_counts
    e, t, fail = _e_value(policy, "errors_vs_stable", state.statistics.relative)
    return (Check(
        name="errors_vs_stable", verdict="fail" if fail else "pass",
        value=_rate(canary), threshold=_rate(state.stable_counts), samples=canary.requests,
        statistic=e,
        detail=f"mixture SPRT on the canary's share of errors; rejects at log e >= {t:.3f}"),)


def error_rate_limit(policy: CanaryPolicy, state: CanaryState,
                     obs: Observations) -> tuple[Check, ...]:
    """The canary's error rate against `max_error_rate`: `fail` when the SPRT rejects,
    `pass` only when the step's own rate is within it."""
    canary = state.canary_counts
    rate = _rate(canary)
    e, t, fail = _e_value(policy, "error_rate_limit", state.statistics.limit)
    return (Check(
        name="error_rate_limit", verdict="fail" if fail else (
            "pass" if rate is not None and rate <= policy.max_error_rate else "unknown"),
        value=rate, threshold=policy.max_error_rate, samples=canary.requests,
        statistic=e, detail=f"mixture SPRT vs max_error_rate, rejects at log e >= "
                            f"{t:.3f}; to step, the step's rate must be within it"),)


def _p99s(state: CanaryState) -> tuple[float | None, float | None, int, int]:
    """The step's p99 of each version (seconds) and how many latencies each saw."""
    c, s = state.canary_counts.latency, state.stable_counts.latency
    n_c = int(round(max(c.values()))) if c else 0
    n_s = int(round(max(s.values()))) if s else 0
    return histogram_quantile(0.99, c), histogram_quantile(0.99, s), n_c, n_s


def latency_p99(policy: CanaryPolicy, state: CanaryState,
                obs: Observations) -> tuple[Check, ...]:
    """The canary's p99 against `max_p99_ms`: `fail` when its tail SPRT rejects, `pass` once
    the step's p99 is within the limit on `min_latency_samples`; `skipped` without a histogram."""
    if obs.canary.latency is None:
        return (Check(name="latency_p99", verdict="skipped",
                      detail="the metric source has no latency histogram"),)
    p99_c, _, n_c, _ = _p99s(state)
    enough = n_c >= policy.min_latency_samples and p99_c is not None
    p99_c_ms = None if p99_c is None else p99_c * 1000
    e, t, fail = _e_value(policy, "latency_p99", state.statistics.latency_limit)
    return (Check(
        name="latency_p99", value=p99_c_ms, threshold=policy.max_p99_ms, samples=n_c,
        statistic=e, verdict="fail" if fail else "unknown" if not enough else (
            "pass" if p99_c_ms is not None and p99_c_ms <= policy.max_p99_ms else "unknown"),
        detail=f"SPRT: share of canary requests above the limit vs 1 %, rejects at log e >= "
               f"{t:.3f}; to step, the step's p99 must be within the limit "
               f"on {policy.min_latency_samples}+ samples"),)


def latency_vs_stable(policy: CanaryPolicy, state: CanaryState,
                      obs: Observations) -> tuple[Check, ...]:
    """The canary's p99 against stable's: `fail` when its slow-request SPRT rejects, `pass`
    when both have enough samples and the ratio (or the difference) is within the policy."""
    if obs.canary.latency is None:
        return ()
    if state.weight >= 100:
        return (Check(name="latency_vs_stable", verdict="skipped", detail=_AT_100),)
    p99_c, p99_s, n_c, n_s = _p99s(state)
    p99_c_ms = None if p99_c is None else p99_c * 1000
    p99_s_ms = None if p99_s is None else p99_s * 1000
    enough = n_c >= policy.min_latency_samples and p99_c is not None
    both = enough and n_s >= policy.min_latency_samples and bool(p99_s)
    ratio = (p99_c / p99_s) if (both and p99_c is not None and p99_s) else None
    within = ratio is not None and p99_c_ms is not None and p99_s_ms is not None and (
        ratio <= policy.max_latency_ratio
        or p99_c_ms - p99_s_ms <= policy.min_latency_difference_ms)
    e, t, fail = _e_value(policy, "latency_vs_stable", state.statistics.latency_relative)
    return (Check(
        name="latency_vs_stable", value=ratio, threshold=policy.max_latency_ratio,
        samples=min(n_c, n_s), statistic=e,
        verdict="fail" if fail else ("pass" if both and within else "unknown"),
        detail=f"p99 ratio canary/stable (ms {_ms(p99_c_ms)} vs {_ms(p99_s_ms)}); "
               f"SPRT on the canary's share of requests slower than "
               f"{policy.max_latency_ratio:g}x stable's p99, rejects at log e >= "
               f"{t:.3f}; to step, the ratio must be within it"),)


def _quality_check(policy: CanaryPolicy, qc: QualityCheck, state: CanaryState) -> Check:
    """One model-quality check (`promotion/decision/quality.py`) as evidence."""
    name = f"quality_{qc.name}"
    if state.weight >= 100:
        return Check(name=name, verdict="skipped", detail=_AT_100)
    canary, stable = state.canary_counts, state.stable_counts
    family = quality.family_log_e(state.statistics.quality, policy.quality.checks)
    v = quality.judge(policy.quality, qc, state.statistics.quality.get(qc.name),
                      canary.quality.get(qc.signal), stable.quality.get(qc.signal),
                      min_answers=policy.min_requests, alpha=policy.alpha, family=family,
                      pass_log_lr=state.pass_evidence.get(qc.name))
    return Check(name=name, verdict=v.verdict, value=v.canary_share, threshold=v.stable_share,
                 samples=v.samples, statistic=v.statistic, detail=v.detail)


def model_quality(policy: CanaryPolicy, state: CanaryState,
                  obs: Observations) -> tuple[Check, ...]:
    """The poor answers of each of the policy's quality checks, one `quality_<name>` each."""
    return tuple(_quality_check(policy, qc, state) for qc in policy.quality.checks)


def distribution_check(policy: CanaryPolicy, state: CanaryState,
                       obs: Observations) -> tuple[Check, ...]:
    """The answers' distribution (`promotion/decision/distribution.py`), when the policy
    has one and either version's answers were measured."""
    canary, stable = state.canary_counts, state.stable_counts
    if policy.quality.distribution is None or not (canary.quality or stable.quality):
        return ()
    if state.weight >= 100:
        return (Check(name="quality_distribution", verdict="skipped", detail=_AT_100),)
    verdict, statistic, threshold, samples, detail = distribution.judge(
        policy.quality.distribution, state.statistics.distribution, canary.quality,
        stable.quality, policy.quality.min_answers or policy.min_requests, alpha=policy.alpha)
    return (Check(name="quality_distribution", verdict=verdict, samples=samples,
                  statistic=statistic, threshold=threshold, detail=detail),)


def class_mix_check(policy: CanaryPolicy, state: CanaryState,
                    obs: Observations) -> tuple[Check, ...]:
    """The classes per image (`promotion/decision/class_mix.py`), when the policy has a
    class mix and either version's classes were counted."""
    canary, stable = state.canary_counts, state.stable_counts
    if policy.quality.class_mix is None or not (canary.classes or stable.classes):
        return ()
    if state.weight >= 100:
        return (Check(name="quality_class_mix", verdict="skipped", detail=_AT_100),)
    verdict, statistic, threshold, samples, detail = class_mix.judge(
        policy.quality, state.statistics.class_mix, canary.classes, stable.classes,
        images_answered(canary.quality), images_answered(stable.quality),
        policy.quality.min_answers or policy.min_requests, alpha=policy.alpha,
        pass_evidence=state.pass_evidence)
    return (Check(name="quality_class_mix", verdict=verdict, samples=samples,
                  statistic=statistic, threshold=threshold, detail=detail),)


def answers_check(policy: CanaryPolicy, state: CanaryState,
                  obs: Observations) -> tuple[Check, ...]:
    """The paired answers (`promotion/decision/answers.py`); none when the window was not
    probed. Reads only the window: the probe is evidence of its own."""
    if obs.answers is None:
        return ()
    verdict, share, limit, units, detail = answers.judge(policy.quality.answers, obs.answers,
                                                         alpha=policy.alpha)
    return (Check(name="answers", verdict=verdict, value=share, threshold=limit,
                  samples=units, statistic=None if share is None else
                  (obs.answers.relabelled / obs.answers.matched if obs.answers.matched else 0.0),
                  detail=detail),)


def requests(policy: CanaryPolicy, state: CanaryState, obs: Observations) -> tuple[Check, ...]:
    """The canary's requests in this step against `min_requests`: `unknown` until reached."""
    n = state.canary_counts.requests
    return (Check(name="requests", value=float(n), threshold=float(policy.min_requests),
                  samples=n, verdict="pass" if n >= policy.min_requests else "unknown",
                  detail="canary requests in this step"),)


CHECKS: tuple[CheckRule, ...] = (
    traffic,
    errors_vs_stable,
    error_rate_limit,
    latency_p99,
    latency_vs_stable,
    model_quality,
    distribution_check,
    class_mix_check,
    answers_check,
    requests,
)
"""The checks of a counted window, in the order its evidence lists them."""
