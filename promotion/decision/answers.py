"""The paired answers check: the same images answered by stable and canary, compared. Pure.

Why it exists: a label map rotated by one (`labels` / `label_list` shifted in
`infer_cfg.yml`, weights unchanged) answers 200, fast and confident. On a
skewed class mix the class-mix check (`promotion/decision/class_mix.py`) sees the
shares move; on a balanced mix (the shapes example: 33/31/36 %) a rotation
moves each share by at most 5 points and no count of names can see it:
`benchmarks/canary_quality.py` measured it promoted in 1000 of 1000 runs.
Asking both versions about the *same* images can: the boxes are where they
were, only their names changed.

The evidence. The controller sends a probe set (real images the stable
version ships with its export, `contracts.artifact.PROBE_DIR`, served by the
stable's server) to both versions through the router, pinned to each by a
header (`promotion/metrics/probe.py`). Per image, each canary box is matched to a
stable box (IoU >= `min_iou`, greedy by score: the best-scoring canary box
takes the stable box it overlaps most, as COCO's evaluation matches
detections to ground truth), and a matched pair whose labels differ is
*relabelled*. Boxes either version finds alone say nothing about names and
are not counted: the per-image checks judge missing answers.

The decision. `relabelled` of `matched` pairs is a binomial share; its
one-sided lower Clopper-Pearson bound at `confidence` (exact, no normal
approximation: the counts are a few dozen) is compared with `max_share`, the
share of relabelled boxes a harmless retrain may reach (a retrain names a few
borderline boxes otherwise; a rotated map renames nearly all, two swapped
labels about 2/3 on a balanced mix). Roll back when the bound is above it.
No matched box (a probe set without objects, a version that finds nothing)
gives no verdict: the check is skipped, never passed on silence. The bound
covers the choice of probe images; the answers themselves are deterministic
on CPU, so looking again every window repeats the same evidence rather than
adding chances to fail (which is why it is not a sequential test like the
others, and why `confidence` is stricter than the usual 95 %).

Rejected: counting disagreements on every client request (the canary and
stable never see the same request), and mirroring live traffic to both (twice
the inference for every request, and Istio's mirror drops the answers).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Literal, NamedTuple, Sequence

from promotion.decision.observations import PairedAnswers
from promotion.decision.policy import AnswersCheck

__all__ = ["Box", "PairedAnswers", "compare", "iou", "judge", "lower_bound", "match"]

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
    pairs: Counter[str] = Counter()
    for boxes_s, boxes_c in zip(stable, canary, strict=True):
        kept_s = [b for b in boxes_s if b.score >= check.min_score]
        kept_c = [b for b in boxes_c if b.score >= check.min_score]
        n_s, n_c = n_s + len(kept_s), n_c + len(kept_c)
        for a, b in match(kept_s, kept_c, check.min_iou):
            matched += 1
            if a.label != b.label:
                relabelled += 1
                pairs[f"{a.label} -> {b.label}"] += 1
    return PairedAnswers(images=len(stable), stable_boxes=n_s, canary_boxes=n_c,
                         matched=matched, relabelled=relabelled, pairs=dict(sorted(pairs.items())))


def _tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))


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


def judge(check: AnswersCheck | None,
          answers: PairedAnswers | None) -> tuple[Verdict, float | None, float, int, str]:
    """(verdict, lower bound, max_share, matched boxes, detail). The detail's first
    clause is the reason a rollback commit carries."""
    if check is None:
        return "skipped", None, 0.0, 0, "paired answers: off (quality.answers: null)"
    if answers is None:
        return "skipped", None, check.max_share, 0, "paired answers: not probed"
    if answers.error is not None:
        return "skipped", None, check.max_share, 0, f"paired answers: no probe: {answers.error}"
    n, k = answers.matched, answers.relabelled
    counts = (f"{answers.images} probe images, {answers.stable_boxes} stable and "
              f"{answers.canary_boxes} canary boxes scoring >= {check.min_score:g}, "
              f"{n} matched at IoU >= {check.min_iou:g}")
    if n < check.min_matched:
        return "skipped", None, check.max_share, n, \
            f"paired answers: no verdict: {counts} (needs {check.min_matched})"
    low = lower_bound(k, n, check.confidence)
    examples = ", ".join(f"{pair} x{c}" for pair, c in
                         sorted(answers.pairs.items(), key=lambda kv: -kv[1])[:3])
    detail = (f"{k}/{n} matched boxes labelled differently, >= {low:.0%} at "
              f"{check.confidence:.0%}{f': {examples}' if examples else ''} (harmless up to "
              f"{check.max_share:.0%}; {counts})")
    return ("fail" if low > check.max_share else "pass"), low, check.max_share, n, detail
