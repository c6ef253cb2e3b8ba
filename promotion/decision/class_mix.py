"""The class-mix check: does the canary detect the classes in stable's proportions? Pure.

A label map shifted by one (`label_list` rotated in `infer_cfg.yml`, weights
unchanged) answers every request 200, fast and confident, and wrong: each
detection carries its neighbour's name. Neither the error rate, the latency
nor the per-image quality signals (detections per image, best score) can see
it; the classes the version names can. The model server counts its
detections by class (`serving/metrics.py`: `model_class_detections_total`,
the model's own class names and `other`), and this check compares the
canary's mix with stable's over the same windows.

The test, per class and per direction (more of it, less of it): given the
two versions' detections of class c in a window, under "the canary's share
of class c is stable's" the canary's count is Binomial(c's detections in
both, pi) with pi the canary's share of all detections: the same
conditional test as the error check (`stats.update_relative`), which needs
no estimate of stable's mix and survives a change of weight. Its null is
moved to `min_ratio` x stable's share (and, for "less", stable's to
`min_ratio` x the canary's), so a retrain that moves a class's share by a
few percent is not evidence. A direction fails when its mixture e-value
passes 1 / (alpha_share / (2 x classes)) -- Bonferroni over every class and
both directions, so the check as a whole rolls back a canary whose mix is
within the margin with probability at most its share of `quality.alpha`,
however often it is looked at -- *and* the class's share moved by at least
`min_difference` (a rare class doubling from 0.5 % to 1 % is not a wrong
label map).

What it can see: a rotated or swapped label map moves shares only as far as
the classes differ in frequency. With a skewed mix (most real data sets) a
swap of two classes moves their shares by the difference of their
frequencies; with a perfectly balanced mix a rotation is invisible to any
count of names (`benchmarks/canary_quality.py` measures both).

To pass a step the canary needs `min_answers` detections, no rejection, and
(as the per-image checks, `quality.pass_confidence`) each class's share shown
inside the margins around stable's: without that rule two swapped labels
passed the first step on silence before the evidence piled up. A class at
10 % needs about 270 canary detections to be shown within them, one at a
third about 140.
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import NormalDist
from typing import Literal

from promotion.decision import stats
from promotion.decision.policy import QualitySpec

__all__ = ["judge", "shares", "update"]

Verdict = Literal["pass", "fail", "unknown", "skipped"]


def shares(classes: Mapping[str, float]) -> dict[str, float]:
    """Each class's share of the detections (empty when there are none)."""
    total = sum(max(0.0, float(v)) for v in classes.values())
    return {k: max(0.0, float(v)) / total for k, v in sorted(classes.items())} if total else {}


def _keys(canary: Mapping[str, float], stable: Mapping[str, float]) -> list[str]:
    return sorted(set(canary) | set(stable))


def update(log_lr: Mapping[str, tuple[float, ...]] | None, spec: QualitySpec,
           canary: Mapping[str, float] | None,
           stable: Mapping[str, float] | None) -> dict[str, tuple[float, ...]]:
    """Add one window's class counts to the per class and direction tests
    (keys `<class>+`: the canary names it more often, `<class>-`: less often)."""
    out = dict(log_lr or {})
    check = spec.class_mix
    if check is None or not canary or not stable:
        return out
    n_c = sum(max(0.0, float(v)) for v in canary.values())
    n_s = sum(max(0.0, float(v)) for v in stable.values())
    if n_c <= 0 or n_s <= 0:
        return out
    initial = tuple(stats.initial(stats.QUALITY_GRID))
    for name in _keys(canary, stable):
        x_c, x_s = max(0.0, float(canary.get(name, 0))), max(0.0, float(stable.get(name, 0)))
        more = stats.update_relative(out.get(f"{name}+", initial), x_c, x_s, n_c, n_s,
                                     grid=stats.QUALITY_GRID, null_ratio=check.min_ratio)
        less = stats.update_relative(out.get(f"{name}-", initial), x_s, x_c, n_s, n_c,
                                     grid=stats.QUALITY_GRID, null_ratio=check.min_ratio)
        out[f"{name}+"] = tuple(float(x) for x in more)
        out[f"{name}-"] = tuple(float(x) for x in less)
    return out


def threshold(spec: QualitySpec, classes: int) -> float:
    """The log e-value at which one class and direction rejects (Bonferroni)."""
    share = 1.0 / spec.test_count / max(1, 2 * classes)
    return stats.rejection_log_threshold(spec.alpha, share)


def judge(spec: QualitySpec, log_lr: Mapping[str, tuple[float, ...]] | None,
          canary: Mapping[str, float] | None, stable: Mapping[str, float] | None,
          min_answers: int) -> tuple[Verdict, float, float, int, str]:
    """(verdict, statistic, threshold, canary detections, detail) over the step's counts
    and the rollout's tests. The statistic is the largest log e-value of any class and
    direction; the detail names the classes' shares and the one that moved most."""
    check = spec.class_mix
    if check is None:
        return "skipped", 0.0, 0.0, 0, "class mix: off (quality.class_mix: null)"
    canary, stable = dict(canary or {}), dict(stable or {})
    if not canary and not stable:
        return "skipped", 0.0, 0.0, 0, "class mix: not measured by the metric source"
    names = _keys(canary, stable)
    limit = threshold(spec, len(names))
    share_c, share_s = shares(canary), shares(stable)
    n_c = int(round(sum(canary.values())))
    evidence = {key: float(stats.log_e_value(lam)) for key, lam in (log_lr or {}).items()}
    worst_key = max(evidence, key=lambda k: evidence[k], default=None)
    statistic = evidence[worst_key] if worst_key is not None else 0.0
    failed = []
    for key, value in evidence.items():
        name = key[:-1]
        moved = share_c.get(name, 0.0) - share_s.get(name, 0.0)
        if value >= limit and abs(moved) >= check.min_difference and \
                (moved > 0) == key.endswith("+"):
            failed.append(name)
    mix = ", ".join(f"{n} {share_c.get(n, 0.0):.1%} vs {share_s.get(n, 0.0):.1%}"
                    for n in names)
    detail = (f"canary's detections by class vs stable's: {mix}, {n_c} canary detections "
              f"(SPRT per class and direction vs {check.min_ratio:g}x the other's share, "
              f"rejects at log e >= {limit:.3f}; harmless below {check.min_difference:.0%} "
              f"points)")
    if failed:
        return "fail", statistic, limit, n_c, f"classes {', '.join(sorted(set(failed)))} " \
            f"moved: {detail}"
    unshown = _not_shown_within(spec, canary, share_s)
    if spec.pass_confidence is not None:
        detail += (f"; every class's share shown within the margins at "
                   f"{spec.pass_confidence:.0%} confidence" if not unshown else
                   f"; not yet shown within the margins: {', '.join(unshown)}")
    if n_c >= min_answers and share_s and not unshown:
        return "pass", statistic, limit, n_c, detail
    return "unknown", statistic, limit, n_c, detail


def _not_shown_within(spec: QualitySpec, canary: Mapping[str, float],
                      share_s: Mapping[str, float]) -> list[str]:
    """Classes whose canary share is not yet shown inside the margins around stable's
    (Wilson's interval at `pass_confidence`, each side); none without that rule."""
    check = spec.class_mix
    if spec.pass_confidence is None or check is None or not share_s:
        return []
    z = NormalDist().inv_cdf(spec.pass_confidence)
    n_c = int(round(sum(max(0.0, float(v)) for v in canary.values())))
    out = []
    for name, s in share_s.items():
        low, high = stats.wilson_interval(int(round(canary.get(name, 0.0))), n_c, z)
        if high > max(check.min_ratio * s, s + check.min_difference) or \
                low < min(s / check.min_ratio, s - check.min_difference):
            out.append(name)
    return out
