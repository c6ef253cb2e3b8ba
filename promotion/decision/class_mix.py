"""The class-mix check: does the canary name the classes in as many images as stable? Pure.

Per class and direction, the canary's share of images naming the class
(`model_class_images_total`, one image one trial) against stable's, by the error check's
conditional test (`stats.update_relative`) with its null moved to `min_ratio`; the
classes and directions are one family at the check's share of `alpha`. To pass a step,
each class's share is shown within the wider pass margins (`update_pass`). Why:
docs/canary.md, "The class mix".
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from promotion.decision import stats
from promotion.decision.policy import QualitySpec

__all__ = ["PASS_KEY", "judge", "shares", "threshold", "update", "update_pass"]

from typing import Literal

Verdict = Literal["pass", "fail", "unknown", "skipped"]


def shares(classes: Mapping[str, float], images: float) -> dict[str, float]:
    """Each class's share of the images (empty without images)."""
    if images <= 0:
        return {}
    return {k: min(1.0, max(0.0, float(v)) / images) for k, v in sorted(classes.items())}


def _keys(canary: Mapping[str, float], stable: Mapping[str, float]) -> list[str]:
    return sorted(set(canary) | set(stable))


def update(log_lr: Mapping[str, tuple[float, ...]] | None, spec: QualitySpec,
           canary: Mapping[str, float] | None, stable: Mapping[str, float] | None,
           canary_images: float, stable_images: float) -> dict[str, tuple[float, ...]]:
    """Add one window's per-image class counts to the per class and direction tests
    (keys `<class>+`: the canary names it in more of its images, `<class>-`: fewer).
    `*_images`: the images each version answered in the window."""
    out = dict(log_lr or {})
    check = spec.class_mix
    if check is None or not canary or not stable:
        return out
    n_c, n_s = float(canary_images), float(stable_images)
    if n_c <= 0 or n_s <= 0:
        return out
    initial = tuple(stats.initial(stats.QUALITY_GRID))
    for name in _keys(canary, stable):
        x_c = min(n_c, max(0.0, float(canary.get(name, 0))))
        x_s = min(n_s, max(0.0, float(stable.get(name, 0))))
        more = stats.update_relative(out.get(f"{name}+", initial), x_c, x_s, n_c, n_s,
                                     grid=stats.QUALITY_GRID, null_ratio=check.min_ratio)
        less = stats.update_relative(out.get(f"{name}-", initial), x_s, x_c, n_s, n_c,
                                     grid=stats.QUALITY_GRID, null_ratio=check.min_ratio)
        out[f"{name}+"] = tuple(float(x) for x in more)
        out[f"{name}-"] = tuple(float(x) for x in less)
    return out


PASS_KEY = "class_mix:"
"""Prefix of the class mix's keys in the step's `pass_evidence` (`<prefix><class>+|-`)."""


def update_pass(evidence: Mapping[str, tuple[float, ...]] | None, spec: QualitySpec,
                canary: Mapping[str, float] | None, stable: Mapping[str, float] | None,
                canary_images: float, stable_images: float) -> dict[str, tuple[float, ...]]:
    """Add one window to the step's evidence that each class is *within* the pass margin:
    `<class>+`, the canary's share below `pass_ratio` x stable's; `<class>-`, stable's
    below `pass_ratio` x the canary's (the rollback tests pointed the other way)."""
    out = dict(evidence or {})
    check = spec.class_mix
    if check is None or not canary or not stable or canary_images <= 0 or stable_images <= 0:
        return out
    n_c, n_s = float(canary_images), float(stable_images)
    initial = tuple(stats.initial(stats.PASS_GRID))
    for name in _keys(canary, stable):
        x_c = min(n_c, max(0.0, float(canary.get(name, 0))))
        x_s = min(n_s, max(0.0, float(stable.get(name, 0))))
        up, down = f"{PASS_KEY}{name}+", f"{PASS_KEY}{name}-"
        out[up] = tuple(float(v) for v in stats.update_relative(
            out.get(up, initial), x_c, x_s, n_c, n_s, grid=stats.PASS_GRID,
            null_ratio=check.pass_ratio))
        out[down] = tuple(float(v) for v in stats.update_relative(
            out.get(down, initial), x_s, x_c, n_s, n_c, grid=stats.PASS_GRID,
            null_ratio=check.pass_ratio))
    return out


def threshold(alpha: float) -> float:
    """The family's log e-value at which the check rejects."""
    return stats.rejection_log_threshold(alpha, stats.ALPHA_SHARES["class_mix"])


def judge(spec: QualitySpec, log_lr: Mapping[str, tuple[float, ...]] | None,
          canary: Mapping[str, float] | None, stable: Mapping[str, float] | None,
          canary_images: float, stable_images: float, min_answers: int,
          alpha: float = 0.01, pass_evidence: Mapping[str, tuple[float, ...]] | None = None
          ) -> tuple[Verdict, float, float, int, str]:
    """(verdict, family statistic, threshold, canary images, detail) over the step's
    counts and the rollout's tests (`pass_evidence`: the step's, `update_pass`). The
    statistic is the log of the average e-value of every class and direction; the detail
    names each class's shares and those moved."""
    check = spec.class_mix
    if check is None:
        return "skipped", 0.0, 0.0, 0, "class mix: off (quality.class_mix: null)"
    canary, stable = dict(canary or {}), dict(stable or {})
    if not canary and not stable:
        return "skipped", 0.0, 0.0, 0, "class mix: not measured by the metric source"
    names = _keys(canary, stable)
    limit = threshold(alpha)
    share_c, share_s = shares(canary, canary_images), shares(stable, stable_images)
    n_c = int(round(canary_images))
    evidence = {key: float(stats.log_e_value(lam)) for key, lam in (log_lr or {}).items()}
    family = stats.mean_log_e(list(evidence.values()))
    failed = []
    for key, value in evidence.items():
        name = key[:-1]
        moved = share_c.get(name, 0.0) - share_s.get(name, 0.0)
        if family >= limit and value >= family and abs(moved) >= check.min_difference and \
                (moved > 0) == key.endswith("+"):
            failed.append(name)
    mix = ", ".join(f"{n} {share_c.get(n, 0.0):.1%} vs {share_s.get(n, 0.0):.1%}"
                    for n in names)
    detail = (f"images naming each class, canary vs stable: {mix}, {n_c} canary images "
              f"(SPRT per class and direction vs {check.min_ratio:g}x the other's share, "
              f"their average rejects at log e >= {limit:.3f}; harmless below "
              f"{check.min_difference:.1%} points)")
    if failed:
        return "fail", family, limit, n_c, f"classes {', '.join(sorted(set(failed)))} " \
            f"moved: {detail}"
    unshown = _not_shown_within(spec, canary, stable, canary_images, stable_images,
                                pass_evidence or {})
    if spec.pass_confidence is not None:
        detail += (f"; every class's share shown within the margins at "
                   f"{spec.pass_confidence:.0%} confidence" if not unshown else
                   f"; not yet shown within the margins: {', '.join(unshown)}")
    if n_c >= min_answers and share_s and not unshown:
        return "pass", family, limit, n_c, detail
    return "unknown", family, limit, n_c, detail


def _not_shown_within(spec: QualitySpec, canary: Mapping[str, float],
                      stable: Mapping[str, float], canary_images: float,
                      stable_images: float, evidence: Mapping[str, tuple[float, ...]]
                      ) -> list[str]:
    """Classes not yet shown inside the pass margins around stable's share, each way
    (`<class>+`: harm upward, `<class>-`: downward); none without that rule.

    A direction is harmful when the share is beyond both `pass_ratio` x and
    `pass_difference` points, so either shown suffices, each at half the miss rate: the
    step's two-sample test below the ratio (`update_pass`, e-value >= 2 / miss), or the
    versions' confidence sequences within the difference (`stats.pass_levels`)."""
    check = spec.class_mix
    if spec.pass_confidence is None or check is None or stable_images <= 0:
        return []
    miss = 1.0 - spec.pass_confidence
    enough = math.log(2.0 / miss)
    level_c, level_s = stats.pass_levels(1.0 - miss / 2)
    initial = tuple(stats.initial(stats.PASS_GRID))
    out = []
    for name in _keys(canary, stable):
        up = float(stats.log_e_value(evidence.get(f"{PASS_KEY}{name}+", initial))) >= enough
        down = float(stats.log_e_value(evidence.get(f"{PASS_KEY}{name}-", initial))) >= enough
        if not (up and down):  # the difference route (the sequences cost more to compute)
            c_low, c_high = stats.confidence_sequence(canary.get(name, 0.0), canary_images,
                                                      level_c)
            s_low, s_high = stats.confidence_sequence(stable.get(name, 0.0), stable_images,
                                                      level_s)
            up = up or c_high <= s_low + check.pass_difference
            down = down or c_low >= s_high - check.pass_difference
        if not (up and down):
            out.append(name)
    return out
