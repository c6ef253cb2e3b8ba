"""The paired answers check: the same images answered by stable and canary, compared. Pure.

The probe images (`promotion/metrics/probe.py`) are answered by both versions; canary
boxes are matched to stable boxes by IoU, and per image and stable class an image is
renamed when most of its matched boxes changed label. Per class and pooled, an exact
binomial test against `max_share`, combined by Holm's step-down over Tarone's testable
classes at the check's share of `alpha`; too few matched images give no verdict. It
sees a rotated label map that no share of names can. Why: docs/canary.md.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Literal, Mapping, NamedTuple, Sequence

from promotion.decision import stats
from promotion.decision.observations import PairedAnswers
from promotion.decision.policy import AnswersCheck

__all__ = ["Box", "PairedAnswers", "compare", "holm", "iou", "judge", "lower_bound", "match",
           "p_value", "testable"]

Verdict = Literal["pass", "fail", "unknown", "skipped"]


class Box(NamedTuple):
    """One detection as the serving protocol returns it (pixels of the sent image)."""

    label: str
    score: float
    x1: float
    y1: float
    x2: float
    y2: float


def iou(a: Box, b: Box) -> float:
    """Intersection over union of two boxes (0 when either is empty)."""
    w = min(a.x2, b.x2) - max(a.x1, b.x1)
    h = min(a.y2, b.y2) - max(a.y1, b.y1)
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    union = (a.x2 - a.x1) * (a.y2 - a.y1) + (b.x2 - b.x1) * (b.y2 - b.y1) - inter
    return inter / union if union > 0 else 0.0


def match(stable: Sequence[Box], canary: Sequence[Box],
          min_iou: float = 0.5) -> list[tuple[Box, Box]]:
    """(stable box, canary box) pairs: canary boxes by descending score, each takes the
    unmatched stable box it overlaps most, if that overlap is at least `min_iou`; among
    equal overlaps, the one whose score is closest. Labels play no part: the point is to
    find pairs whose labels differ. (A CenterNet-style head answers one object with a
    peak per class at the same cell, so identical boxes with other labels and lower
    scores are common; without the score tie-break a rotated map matched the wrong
    peaks and showed 5 of 7 boxes renamed instead of 7 of 7.)"""
    free = list(range(len(stable)))
    pairs = []
    for box in sorted(canary, key=lambda b: -b.score):
        best, best_key = None, (min_iou, -math.inf)
        for i in free:
            key = (iou(stable[i], box), -abs(stable[i].score - box.score))
            if key[0] >= min_iou and key >= best_key:
                best, best_key = i, key
        if best is not None:
            free.remove(best)
            pairs.append((stable[best], box))
    return pairs


def compare(stable: Sequence[Sequence[Box]], canary: Sequence[Sequence[Box]],
            check: AnswersCheck) -> PairedAnswers:
    """Both versions' boxes per probe image (same order) -> the paired counts. Boxes
    scoring below `check.min_score` are left out on both sides."""
    if len(stable) != len(canary):
        return PairedAnswers.failed(f"stable answered {len(stable)} images, the canary "
                                    f"{len(canary)}: not the same probe")
    matched = relabelled = n_s = n_c = 0
    matched_images = renamed_images = 0
    pairs: Counter[str] = Counter()
    units: dict[str, list[int]] = {}  # stable class -> [images with it matched, renamed]
    for boxes_s, boxes_c in zip(stable, canary, strict=True):
        kept_s = [b for b in boxes_s if b.score >= check.min_score]
        kept_c = [b for b in boxes_c if b.score >= check.min_score]
        n_s, n_c = n_s + len(kept_s), n_c + len(kept_c)
        votes: dict[str, list[int]] = {}  # stable class -> [matched, renamed] in this image
        for a, b in match(kept_s, kept_c, check.min_iou):
            matched += 1
            vote = votes.setdefault(a.label, [0, 0])
            vote[0] += 1
            if a.label != b.label:
                relabelled += 1
                vote[1] += 1
                pairs[f"{a.label} -> {b.label}"] += 1
        if votes:
            matched_images += 1
            renamed_images += 2 * sum(v[1] for v in votes.values()) > \
                sum(v[0] for v in votes.values())
        for label, (m, r) in votes.items():
            unit = units.setdefault(label, [0, 0])
            unit[0] += 1
            unit[1] += 2 * r > m
    return PairedAnswers(images=len(stable), stable_boxes=n_s, canary_boxes=n_c,
                         matched=matched, relabelled=relabelled, pairs=dict(sorted(pairs.items())),
                         matched_images=matched_images, renamed_images=renamed_images,
                         classes={k: (v[0], v[1]) for k, v in sorted(units.items())})


def _tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    return min(1.0, sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1)))


def p_value(k: int, n: int, max_share: float) -> float:
    """Exact one-sided p-value of "at most `max_share` of the units are renamed" after k
    of n renamed (1.0 without units)."""
    return 1.0 if n <= 0 else _tail(k, n, max_share)


def lower_bound(k: int, n: int, confidence: float) -> float:
    """One-sided lower Clopper-Pearson bound on a binomial share from k of n: the p
    at which P(X >= k) = 1 - confidence (0 for k = 0). Bisection on the exact tail,
    which rises with p; 60 halvings are far below any share that matters."""
    if n <= 0 or k <= 0:
        return 0.0
    alpha = 1.0 - confidence
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if _tail(k, n, mid) < alpha:
            lo = mid
        else:
            hi = mid
    return lo


def testable(min_p: Mapping[str, float], alpha: float) -> int:
    """Tarone's (1990) number of testable hypotheses: the smallest K such that at most K of
    them could reach alpha / K at all (their smallest achievable p-value). A class with two
    images in the probe can never be rejected at a small level; counting it in the family
    would only weaken the others. The smallest achievable p-value depends on the units
    alone, not on the answers, so the family-wise level is kept."""
    for k in range(1, len(min_p) + 1):
        if sum(p <= alpha / k for p in min_p.values()) <= k:
            return k
    return max(1, len(min_p))


def holm(p_values: Mapping[str, float], alpha: float, family: int | None = None) -> list[str]:
    """The hypotheses Holm's step-down rejects at family-wise level `alpha` (Holm 1979):
    sorted by p-value, the j-th smallest (from 0) is rejected while each so far is at
    most alpha / (m - j), m the family's size (`family`, e.g. Tarone's `testable`; all the
    hypotheses when None)."""
    rejected = []
    m = len(p_values) if family is None else family
    for j, (name, p) in enumerate(sorted(p_values.items(), key=lambda kv: (kv[1], kv[0]))):
        if j >= m or p > alpha / (m - j):
            break
        rejected.append(name)
    return rejected


POOLED = "all classes"
"""The pooled hypothesis' name: every image with a matched box, renamed by majority."""


def judge(check: AnswersCheck | None, answers: PairedAnswers | None,
          alpha: float = 0.01) -> tuple[Verdict, float | None, float, int, str]:
    """(verdict, renamed share of the most evidently renamed class, max_share, images with
    a matched box, detail) at the check's share of the policy's `alpha`. The detail's first
    clause is the reason a rollback commit carries."""
    if check is None:
        return "skipped", None, 0.0, 0, "paired answers: off (quality.answers: null)"
    if answers is None:
        return "skipped", None, check.max_share, 0, "paired answers: not probed"
    if answers.error is not None:
        return "skipped", None, check.max_share, 0, f"paired answers: no probe: {answers.error}"
    n = answers.matched_images
    counts = (f"{answers.images} probe images, {answers.stable_boxes} stable and "
              f"{answers.canary_boxes} canary boxes scoring >= {check.min_score:g}, "
              f"{answers.matched} matched at IoU >= {check.min_iou:g} on {n} images")
    if n < check.min_matched:
        return "skipped", None, check.max_share, n, \
            f"paired answers: no verdict: {counts} (needs {check.min_matched} images)"
    units = {POOLED: (n, answers.renamed_images), **answers.classes}
    p_values = {name: p_value(k, m, check.max_share) for name, (m, k) in units.items() if m}
    level = alpha * stats.ALPHA_SHARES["answers"]
    family = testable({name: p_value(m, m, check.max_share) for name, (m, _) in units.items()
                       if m}, level)
    rejected = holm(p_values, level, family)
    worst = min(p_values, key=lambda name: (p_values[name], name))
    m_w, k_w = units[worst]
    examples = ", ".join(f"{pair} x{c}" for pair, c in
                         sorted(answers.pairs.items(), key=lambda kv: -kv[1])[:3])
    named = [r for r in rejected if r != POOLED] or rejected
    head = ("images renamed: " + ", ".join(
        f"{name} {units[name][1]}/{units[name][0]}" for name in named)) if rejected else \
        f"most renamed: {worst} {k_w}/{m_w} images"
    detail = (f"{head}; {answers.relabelled}/{answers.matched} matched boxes labelled "
              f"differently{f': {examples}' if examples else ''} (harmless up to "
              f"{check.max_share:.0%} of a class's images; exact binomial per class, Holm "
              f"over {family} testable at {level:.2g}; {counts})")
    return ("fail" if rejected else "pass"), k_w / m_w, check.max_share, n, detail
