"""Model-quality checks: does the canary answer worse than stable? Pure, no I/O.

Each `QualityCheck` of the policy counts the images with a poor answer (at most a bound
of a per-image histogram of `serving/metrics.py`) and tests the canary's share against
`min_ratio` x stable's (`stats.update_relative`), the checks one family at their share
of `alpha`. A check passes a step only when the canary's answers show it within the
margins (`shown_within`). Why: docs/canary.md, "Poor answers".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Literal

from promotion.decision import stats
from promotion.decision.observations import Histogram, count_above
from promotion.decision.policy import QualityCheck, QualitySpec

__all__ = ["QualityVerdict", "family_log_e", "harmful_above", "judge", "lower_bound", "mean",
           "poor_answers", "rejection_threshold", "shown_within", "update", "update_pass",
           "upper_bound"]


def poor_answers(hist: Mapping[float, float] | None, at_most: float) -> tuple[int, int] | None:
    """(answers whose value is at most `at_most`, all answers); None when unmeasured.

    `at_most` is rounded up to a bucket bound, as the histogram cannot say more.
    """
    above = count_above(hist, at_most)
    if above is None:
        return None
    slow, total = above
    return total - slow, total


def mean(hist: Mapping[float, float] | None) -> float | None:
    """The mean value, each answer counted at its bucket's upper bound (the
    `+Inf` bucket at the highest finite one): exact for small integer counts
    such as detections per image, an upper estimate for scores."""
    if not hist:
        return None
    total, running = 0.0, 0.0
    finite = [le for le in sorted(hist) if not math.isinf(le)]
    for le in sorted(hist):
        count = max(float(hist[le]), running)  # cumulative counts only grow
        value = le if not math.isinf(le) else (finite[-1] if finite else 0.0)
        total += (count - running) * value
        running = count
    return total / running if running > 0 else None


def update_pass(log_lr: Sequence[float] | None, check: QualityCheck,
                canary: Mapping[float, float] | None,
                stable: Mapping[float, float] | None) -> tuple[float, ...]:
    """Add one window's evidence that the canary's poor share is *below* `min_ratio` x
    stable's (the step's pass test: H0 "harmful by the ratio", alternatives `PASS_GRID`)."""
    lam = tuple(log_lr) if log_lr else tuple(stats.initial(stats.PASS_GRID))
    c, s = poor_answers(canary, check.at_most), poor_answers(stable, check.at_most)
    if c is None or s is None:
        return lam
    new = stats.update_relative(lam, c[0], s[0], c[1], s[1], grid=stats.PASS_GRID,
                                null_ratio=check.min_ratio)
    return tuple(float(x) for x in new)


def update(log_lr: Sequence[float] | None, check: QualityCheck,
           canary: Mapping[float, float] | None,
           stable: Mapping[float, float] | None) -> tuple[float, ...]:
    """Add one window's evidence that the canary's answers are poorer than stable's."""
    lam = tuple(log_lr) if log_lr else tuple(stats.initial(stats.QUALITY_GRID))
    c, s = poor_answers(canary, check.at_most), poor_answers(stable, check.at_most)
    if c is None or s is None:
        return lam
    new = stats.update_relative(lam, c[0], s[0], c[1], s[1], grid=stats.QUALITY_GRID,
                                null_ratio=check.min_ratio)
    return tuple(float(x) for x in new)


@dataclasses.dataclass(frozen=True)
class QualityVerdict:
    """One check's verdict and the numbers behind it."""

    name: str
    verdict: Literal["pass", "fail", "unknown", "skipped"]
    canary_share: float | None
    stable_share: float | None
    samples: int
    statistic: float
    threshold: float
    detail: str

    @property
    def reason(self) -> str:
        """A rollback reason naming the signal and both versions' numbers."""
        return self.detail


def harmful_above(check: QualityCheck, stable_share: float) -> float:
    """The canary's share of poor answers beyond both margins of `check` (what
    it fails on): above `min_ratio` x stable's and `min_difference` over it."""
    return max(check.min_ratio * stable_share, stable_share + check.min_difference)


def upper_bound(poor: int, answers: int, confidence: float) -> float:
    """The canary's share of poor answers at most this, at every look (the upper end of
    the anytime-valid confidence sequence at `confidence`)."""
    return stats.confidence_sequence(poor, answers, confidence)[1]


def lower_bound(poor: int, answers: int, confidence: float) -> float:
    """Stable's share of poor answers at least this, at every look."""
    return stats.confidence_sequence(poor, answers, confidence)[0]


def shown_within(confidence: float, check: QualityCheck, canary: tuple[int, int],
                 stable: tuple[int, int], pass_log_lr: Sequence[float] | None
                 ) -> tuple[bool, str]:
    """Is the canary shown within the check's margins, at `confidence` over every look of
    the step? Harm is both margins exceeded, so either shown suffices, each at half the
    miss rate (a union bound): the step's two-sample test that the canary's poor share is
    below `min_ratio` x stable's (`update_pass`, e-value >= 2 / miss), or the canary's
    confidence sequence below stable's lower one + `min_difference` (the two sharing
    their half, `stats.pass_levels`). (Whether shown, the detail's clause.)"""
    miss = 1.0 - confidence
    lam = tuple(pass_log_lr) if pass_log_lr else tuple(stats.initial(stats.PASS_GRID))
    by_ratio = float(stats.log_e_value(lam)) >= math.log(2.0 / miss)
    level_c, level_s = stats.pass_levels(1.0 - miss / 2)
    upper = upper_bound(canary[0], canary[1], level_c)
    limit = lower_bound(stable[0], stable[1], level_s) + check.min_difference
    by_difference = upper <= limit
    shown = by_ratio or by_difference
    how = (f"shown below {check.min_ratio:g}x stable's share" if by_ratio else
           f"canary's share at most {_pct(upper)}, within stable's + "
           f"{check.min_difference:.0%} ({_pct(limit)})" if by_difference else
           f"not yet shown within the margins (below {check.min_ratio:g}x stable's share, "
           f"or at most {_pct(limit)}: the canary's is at most {_pct(upper)})")
    return shown, f"{how} at {confidence:.0%} confidence (any look)"


def rejection_threshold(alpha: float) -> float:
    """The family's log e-value at which the quality checks reject."""
    return stats.rejection_log_threshold(alpha, stats.ALPHA_SHARES["quality"])


def family_log_e(log_lrs: Mapping[str, Sequence[float]], checks: Sequence[QualityCheck]) -> float:
    """The checks' family e-value (log): the average of each check's mixture e-value."""
    return stats.mean_log_e([float(stats.log_e_value(log_lrs[c.name])) if c.name in log_lrs
                             else 0.0 for c in checks])


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}" if share >= 0.1 else f"{share:.1%}"


def judge(spec: QualitySpec, check: QualityCheck, log_lr: Sequence[float] | None,
          canary: Histogram | None, stable: Histogram | None,
          min_answers: int = 100, alpha: float = 0.01,
          family: float | None = None,
          pass_log_lr: Sequence[float] | None = None) -> QualityVerdict:
    """The check's verdict from the rollout's test state and the step's histograms
    (`min_answers`: `spec.min_answers` when set; `alpha`: the policy's; `family`: the
    checks' family log e-value, `family_log_e`, this check's own when None; `pass_log_lr`:
    the step's `update_pass` evidence)."""
    min_answers = spec.min_answers or min_answers
    lam = tuple(log_lr) if log_lr else tuple(stats.initial(stats.QUALITY_GRID))
    threshold = rejection_threshold(alpha)
    statistic = float(stats.log_e_value(lam))
    family = statistic if family is None else family
    c, s = poor_answers(canary, check.at_most), poor_answers(stable, check.at_most)
    what = check.what or f"answers with {check.signal} <= {check.at_most:g}"
    if c is None and s is None:
        return QualityVerdict(check.name, "skipped", None, None, 0, statistic, threshold,
                              f"{check.signal}: not measured by the metric source")
    share_c = c[0] / c[1] if c and c[1] else None
    share_s = s[0] / s[1] if s and s[1] else None
    mean_c, mean_s = mean(canary), mean(stable)
    means = (f"; mean {check.signal} {mean_c:.2f} vs {mean_s:.2f}"
             if mean_c is not None and mean_s is not None else "")
    detail = (f"canary {_pct(share_c)} {what}, stable {_pct(share_s)}{means} "
              f"(SPRT vs {check.min_ratio:g}x stable's share, the checks' average rejects at "
              f"log e >= {threshold:.3f}; harmless below +{check.min_difference:.0%})")
    samples = c[1] if c else 0
    worse = share_c is not None and share_s is not None and \
        share_c - share_s >= check.min_difference
    shown = True
    if spec.pass_confidence is not None and c and s and share_s is not None:
        shown, how = shown_within(spec.pass_confidence, check, c, s, pass_log_lr)
        detail += f"; {how}"
    verdict: Literal["pass", "fail", "unknown", "skipped"]
    if family >= threshold and statistic >= family and worse:
        verdict = "fail"
    elif samples >= min_answers and share_s is not None and shown:
        verdict = "pass"
    else:
        verdict = "unknown"
    return QualityVerdict(check.name, verdict, share_c, share_s, samples, statistic, threshold,
                          detail)
