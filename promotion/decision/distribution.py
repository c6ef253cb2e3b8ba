"""The answers' distribution: are the canary's answers poorer than stable's anywhere? Pure.

For each of the policy's bounds on confident detections and best score per image, the
canary's share of images at or below it is tested against `min_ratio` x stable's
(`stats.update_relative`); the bounds are one family (`stats.mean_log_e`) at the
check's share of `alpha`. It passes a step on `min_answers` images without a rejection.
Why: docs/canary.md, "The answers' distribution".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from promotion.decision import stats
from promotion.decision.observations import Histogram
from promotion.decision.policy import DistributionCheck
from promotion.decision.quality import poor_answers

__all__ = ["judge", "key", "keys", "threshold", "update"]

Verdict = Literal["pass", "fail", "unknown", "skipped"]


def key(signal: str, bound: float) -> str:
    """The state key of one signal and bound (`top_score<=0.9`)."""
    return f"{signal}<={bound:g}"


def keys(check: DistributionCheck) -> list[tuple[str, str, float]]:
    """(key, signal, bound) of every member of the family, in a fixed order."""
    return [(key(signal, b), signal, float(b)) for signal in sorted(check.bounds)
            for b in check.bounds[signal]]


def update(log_lr: Mapping[str, tuple[float, ...]] | None, check: DistributionCheck | None,
           canary: Mapping[str, Histogram], stable: Mapping[str, Histogram]
           ) -> dict[str, tuple[float, ...]]:
    """Add one window's histograms to every bound's test."""
    out = dict(log_lr or {})
    if check is None:
        return out
    initial = tuple(stats.initial(stats.QUALITY_GRID))
    for name, signal, bound in keys(check):
        c, s = poor_answers(canary.get(signal), bound), poor_answers(stable.get(signal), bound)
        if c is None or s is None:
            continue
        new = stats.update_relative(out.get(name, initial), c[0], s[0], c[1], s[1],
                                    grid=stats.QUALITY_GRID, null_ratio=check.min_ratio)
        out[name] = tuple(float(x) for x in new)
    return out


def threshold(alpha: float) -> float:
    """The family's log e-value at which the check rejects."""
    return stats.rejection_log_threshold(alpha, stats.ALPHA_SHARES["distribution"])


def _pct(share: float) -> str:
    return f"{share:.0%}" if share >= 0.1 else f"{share:.1%}"


def judge(check: DistributionCheck | None, log_lr: Mapping[str, tuple[float, ...]] | None,
          canary: Mapping[str, Histogram], stable: Mapping[str, Histogram], min_answers: int,
          alpha: float = 0.01) -> tuple[Verdict, float, float, int, str]:
    """(verdict, family log e-value, threshold, canary images, detail) from the rollout's
    tests and the step's histograms."""
    if check is None:
        return "skipped", 0.0, 0.0, 0, "distribution: off (quality.distribution: null)"
    members = keys(check)
    measured = [(name, signal, bound, poor_answers(canary.get(signal), bound),
                 poor_answers(stable.get(signal), bound)) for name, signal, bound in members]
    if all(c is None and s is None for *_, c, s in measured):
        return "skipped", 0.0, 0.0, 0, "distribution: not measured by the metric source"
    evidence = {name: float(stats.log_e_value(lam)) for name, lam in (log_lr or {}).items()}
    family = stats.mean_log_e([evidence.get(name, 0.0) for name, *_ in members])
    limit = threshold(alpha)
    samples = max((c[1] for *_, c, _ in measured if c), default=0)
    moved = []
    failed = []
    for name, _, _, c, s in measured:
        if not c or not s or not c[1] or not s[1]:
            continue
        share_c, share_s = c[0] / c[1], s[0] / s[1]
        if share_c > share_s:
            moved.append((evidence.get(name, 0.0), name, share_c, share_s))
        if family >= limit and evidence.get(name, 0.0) >= family and \
                share_c - share_s >= check.min_difference:
            failed.append(f"{name}: canary {_pct(share_c)} of images, stable {_pct(share_s)}")
    worst = sorted(moved, reverse=True)[:2]
    shown = "; ".join(f"{n}: canary {_pct(a)} vs {_pct(b)}" for _, n, a, b in worst)
    test = (f"(SPRT per bound vs {check.min_ratio:g}x stable's share, their average over "
            f"{len(members)} bounds rejects at log e >= {limit:.3f}; harmless below "
            f"+{check.min_difference:.0%})")
    if failed:
        return "fail", family, limit, samples, f"poorer answers: {'; '.join(failed)} {test}"
    detail = f"images at or below each bound, canary vs stable{': ' + shown if shown else ''} " \
        f"{test}"
    if samples >= min_answers and any(s for *_, s in measured):
        return "pass", family, limit, samples, detail
    return "unknown", family, limit, samples, detail
