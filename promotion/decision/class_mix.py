"""The class-mix check: does the canary name the classes in as many images as stable? Pure.

A label map shifted by one (`label_list` rotated in `infer_cfg.yml`, weights
unchanged) answers every request 200, fast and confident, and wrong: each
detection carries its neighbour's name. Neither the error rate, the latency
nor the per-image quality signals (detections per image, best score) can see
it; the classes the version names can. The model server counts, per class,
the images whose answer names it at least once (`serving/metrics.py`:
`model_class_images_total`, the model's own class names and `other`, every
series created at 0 when the server starts), and this check compares the
canary's per-image shares with stable's over the same windows.

**One image is one trial.** A share of *detections* by class is clustered by
image: a crowd image with fifteen objects of one class moves fifteen counts at
once, so a binomial test on detections is overconfident (identical models with
15 % crowd images were rolled back 14.5 % of the time at a stated 0.33 %). An
image names a class or it does not: per class, the canary's images naming it
are Binomial(canary images, p) and stable's Binomial(stable images, p') on
their own, whatever the images hold.

The test, per class and per direction (more of it, less of it): given both
versions' images naming class c in a window, under "the canary names c in as
many of its images as stable does" the canary's count is (at most as spread
as, Hoeffding 1963) Binomial(those images, pi) with pi the canary's share of
all images: the same conditional test as the error check
(`stats.update_relative`), which needs no estimate of stable's shares and
survives a change of weight. Its null is moved to `min_ratio` x stable's
share (and, for "less", stable's to `min_ratio` x the canary's), so a retrain
that moves a class's share a little is not evidence. The classes and
directions are one family with the check's share of the policy's `alpha`
(`stats.ALPHA_SHARES["class_mix"]`): its e-value is the average of its
members' (`stats.mean_log_e`); it fails when that average passes the
threshold, for a class and direction whose own evidence is at least the
average *and* whose share moved by at least `min_difference`.

What it can see: any class whose image share moves by the margin, rare or
common (a vanished class, a 5 % <-> 3 % swap among ten classes), at a speed
set by how many images name it; a label map rotated on a perfectly balanced
mix moves no share and is the paired answers' (`answers.py`) to see.

To pass a step the canary needs `min_answers` images, no rejection, and each
class's share shown inside the margins around stable's by the anytime-valid
confidence sequences of both (`stats.confidence_sequence`, at
`quality.pass_confidence`, each version at half the miss rate).
"""

from __future__ import annotations

from collections.abc import Mapping

from promotion.decision import stats
from promotion.decision.policy import QualitySpec

__all__ = ["judge", "shares", "threshold", "update"]

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


def threshold(alpha: float) -> float:
    """The family's log e-value at which the check rejects."""
    return stats.rejection_log_threshold(alpha, stats.ALPHA_SHARES["class_mix"])


def judge(spec: QualitySpec, log_lr: Mapping[str, tuple[float, ...]] | None,
          canary: Mapping[str, float] | None, stable: Mapping[str, float] | None,
          canary_images: float, stable_images: float, min_answers: int,
          alpha: float = 0.01) -> tuple[Verdict, float, float, int, str]:
    """(verdict, family statistic, threshold, canary images, detail) over the step's
    counts and the rollout's tests. The statistic is the log of the average e-value of
    every class and direction; the detail names each class's shares and those moved."""
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
    unshown = _not_shown_within(spec, canary, stable, canary_images, stable_images)
    if spec.pass_confidence is not None:
        detail += (f"; every class's share shown within the margins at "
                   f"{spec.pass_confidence:.0%} confidence" if not unshown else
                   f"; not yet shown within the margins: {', '.join(unshown)}")
    if n_c >= min_answers and share_s and not unshown:
        return "pass", family, limit, n_c, detail
    return "unknown", family, limit, n_c, detail


def _not_shown_within(spec: QualitySpec, canary: Mapping[str, float],
                      stable: Mapping[str, float], canary_images: float,
                      stable_images: float) -> list[str]:
    """Classes whose canary share is not yet shown inside the margins around stable's
    (both versions' anytime-valid confidence sequences, at half the miss rate each);
    none without that rule."""
    check = spec.class_mix
    if spec.pass_confidence is None or check is None or stable_images <= 0:
        return []
    each = 1.0 - (1.0 - spec.pass_confidence) / 2
    out = []
    for name in _keys(canary, stable):
        c_low, c_high = stats.confidence_sequence(canary.get(name, 0.0), canary_images, each)
        s_low, s_high = stats.confidence_sequence(stable.get(name, 0.0), stable_images, each)
        if c_high > max(check.min_ratio * s_low, s_low + check.min_difference) or \
                c_low < min(s_high / check.min_ratio, s_high - check.min_difference):
            out.append(name)
    return out
