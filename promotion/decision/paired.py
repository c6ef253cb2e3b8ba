"""Champion vs challenger on the same images: a paired bootstrap of COCO mAP.

Both models' detections on the same images, resampled together (the same resample for
both), give the difference a percentile interval with the Monte Carlo error of its ends;
AP over resamples comes from `promotion.decision.coco_ap`, never COCOeval per
resample. `compare_sets` pools several evaluation sets (a stratified bootstrap) and puts
every set's per-class AP@0.5 differences under one simultaneous max-T band. What it
assumes, and why not BCa: docs/gate.md.
"""

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict

from promotion.decision.coco_ap import Matched, average_precision, match_detections, mean_ap
from promotion.errors import DetectionInputError

__all__ = [
    "ClassDifference",
    "Interval",
    "PairedResult",
    "SetMatches",
    "SetsComparison",
    "bootstrap_weights",
    "compare_sets",
    "paired_bootstrap",
    "paired_bootstrap_matched",
]


def bootstrap_weights(images: int, resamples: int, seed: int) -> NDArray[np.int64]:
    """Multiplicities of `resamples` draws of `images` images with replacement."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, images, size=(resamples, images))
    flat = (draws + (np.arange(resamples) * images)[:, None]).ravel()
    return np.bincount(flat, minlength=resamples * images).reshape(resamples, images)


class Interval(BaseModel):
    """An estimate on the val set with its bootstrap interval."""

    model_config = ConfigDict(frozen=True)

    estimate: float
    low: float
    high: float
    mc_error: float = 0.0
    """Monte Carlo error of the ends (the larger of the two), from the resamples' spread."""


class ClassDifference(BaseModel):
    """AP@0.5 of one class for both models and the difference (Bonferroni level)."""

    model_config = ConfigDict(frozen=True)

    category_id: int
    name: str
    candidate: Interval
    production: Interval
    difference: Interval
    """The difference's band, simultaneous over the whole family of class differences."""
    distinguished: bool = True
    """False when no resample tells the two models apart on this class (the same AP
    difference every time): nothing is learnt about it, and it is not judged."""


class PairedResult(BaseModel):
    """The paired bootstrap's answer; differences are candidate - production."""

    model_config = ConfigDict(frozen=True)

    images: int
    resamples: int
    seed: int
    confidence: float
    class_confidence: float
    """The level of the class differences' simultaneous band."""
    candidate: dict[str, Interval]
    production: dict[str, Interval]
    difference: dict[str, Interval]
    classes: list[ClassDifference]
    sd: dict[str, float] = {}
    """The bootstrap standard deviation of each metric's difference (sample-size planning)."""
    class_family: int = 0
    """How many class differences (over every set compared together) the band covers."""


class SetMatches(BaseModel):
    """One evaluation set's class names and both models' matches (`compare_sets`' input)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    class_names: dict[int, str]
    candidate: Matched
    production: Matched

    @staticmethod
    def names_of(ground_truth: Mapping[str, Any]) -> dict[int, str]:
        """Category id -> name of a COCO ground truth."""
        return {int(c["id"]): str(c.get("name", c["id"])) for c in ground_truth["categories"]}


class SetsComparison(BaseModel):
    """Every set on its own, and all their images pooled (the primary comparison)."""

    model_config = ConfigDict(frozen=True)

    pooled: PairedResult
    sets: dict[str, PairedResult]


def _mc_error(samples: NDArray[np.float64], level: float) -> float:
    """How far the percentile ends could move with another seed: half the spread of the
    order statistics one binomial standard deviation either side of each quantile."""
    x = np.sort(samples[np.isfinite(samples)])
    if len(x) < 2:
        return 0.0
    errors = []
    for p in ((1.0 - level) / 2.0, 1.0 - (1.0 - level) / 2.0):
        at, spread = p * (len(x) - 1), math.sqrt(len(x) * p * (1.0 - p))
        lo, hi = max(0, math.floor(at - spread)), min(len(x) - 1, math.ceil(at + spread))
        errors.append((x[hi] - x[lo]) / 2.0)
    return float(max(errors))


def _interval(estimate: float, samples: NDArray[np.float64], level: float) -> Interval:
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.nanpercentile(samples, [tail, 100.0 - tail])
    return Interval(estimate=float(estimate), low=float(low), high=float(high),
                    mc_error=_mc_error(samples, level))


def paired_bootstrap(ground_truth: Mapping[str, Any],
                     candidate: Sequence[Mapping[str, Any]],
                     production: Sequence[Mapping[str, Any]],
                     resamples: int = 1000, seed: int = 0, confidence: float = 0.95
                     ) -> PairedResult:
    """Both models on the same images, the images resampled together."""
    _check(resamples, confidence)
    return paired_bootstrap_matched(ground_truth,
                                    match_detections(ground_truth, candidate, "candidate"),
                                    match_detections(ground_truth, production, "production"),
                                    resamples, seed, confidence)


def _check(resamples: int, confidence: float) -> None:
    if resamples < 1 or not 0.0 < confidence < 1.0:
        raise ValueError("resamples must be >= 1 and confidence in (0, 1)")


def paired_bootstrap_matched(ground_truth: Mapping[str, Any], cand: Matched, prod: Matched,
                             resamples: int = 1000, seed: int = 0, confidence: float = 0.95
                             ) -> PairedResult:
    """`paired_bootstrap` of detections already matched against `ground_truth` (a caller
    that also needs the matches elsewhere matches each model once): one set alone."""
    one = SetMatches(name="val", class_names=SetMatches.names_of(ground_truth),
                     candidate=cand, production=prod)
    return compare_sets([one], resamples, seed, confidence).sets["val"]


class _Boot:
    """One set's (or the pool's) AP on the set itself and on every resample."""

    def __init__(self, cand: Matched, prod: Matched, weights: NDArray[np.int64]) -> None:
        if (cand.image_ids, cand.category_ids) != (prod.image_ids, prod.category_ids):
            raise ValueError("candidate and production were matched against different "
                             "ground truths (images or categories differ)")
        self.present = cand.gt_counts.sum(axis=0) > 0
        if not self.present.any():
            raise DetectionInputError("ground truth: no annotations that COCO would score")
        ones = np.ones((1, len(cand.image_ids)), dtype=np.int64)
        self.ap_c, self.ap_p = average_precision(cand, ones), average_precision(prod, ones)
        self.bs_c, self.bs_p = average_precision(cand, weights), average_precision(prod, weights)

    def class_differences(self) -> tuple[NDArray[np.intp], NDArray[np.float64],
                                         NDArray[np.float64]]:
        """(present class indices, AP@0.5 differences on the set, per resample)."""
        ks = np.flatnonzero(self.present)
        return (ks, self.ap_c[0, 0, ks] - self.ap_p[0, 0, ks],
                self.bs_c[:, 0, ks] - self.bs_p[:, 0, ks])

    def result(self, images: int, resamples: int, seed: int, confidence: float,
               classes: list[ClassDifference], family: int) -> PairedResult:
        m_c, m_p = mean_ap(self.ap_c), mean_ap(self.ap_p)
        s_c, s_p = mean_ap(self.bs_c), mean_ap(self.bs_p)
        keys = ("map50", "map")
        return PairedResult(
            images=images, resamples=resamples, seed=seed, confidence=confidence,
            class_confidence=confidence, class_family=family,
            candidate={k: _interval(m_c[k][0], s_c[k], confidence) for k in keys},
            production={k: _interval(m_p[k][0], s_p[k], confidence) for k in keys},
            difference={k: _interval(m_c[k][0] - m_p[k][0], s_c[k] - s_p[k], confidence)
                        for k in keys},
            sd={k: float(np.nanstd(s_c[k] - s_p[k])) for k in keys},
            classes=classes,
        )


def _critical(deviations: list[NDArray[np.float64]], confidence: float) -> float:
    """The max-T band's multiplier: the `confidence` quantile, over resamples, of the
    largest studentised deviation of any class difference in the family."""
    if not deviations:
        return 0.0
    stacked = np.column_stack(deviations)
    with warnings.catch_warnings():  # a resample where every class is absent: NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        largest = np.nanmax(stacked, axis=1)
    largest = largest[np.isfinite(largest)]
    return float(np.quantile(largest, confidence)) if len(largest) else 0.0


def _pooled(boots: Sequence["_Boot"], sizes: Sequence[int], resamples: int, seed: int,
            confidence: float, family: int) -> PairedResult:
    """All sets together: each metric as the image-weighted mean of the sets' own values,
    on the set itself and in every (stratified) resample. A mean of the sets' mAPs, not
    the mAP of one ranking over all images: COCO's AP over a merged ranking is no average
    of the sets' and can fall below both of them, which no reader of the table expects."""
    w = np.asarray(sizes, dtype=np.float64) / float(sum(sizes))
    keys = ("map50", "map")
    own = {who: [mean_ap(getattr(b, f"ap_{who}")) for b in boots] for who in "cp"}
    draws = {who: [mean_ap(getattr(b, f"bs_{who}")) for b in boots] for who in "cp"}

    def mix(parts: list[dict[str, NDArray[np.float64]]], k: str) -> NDArray[np.float64]:
        return np.sum([wi * part[k] for wi, part in zip(w, parts)], axis=0)

    return PairedResult(
        images=int(sum(sizes)), resamples=resamples, seed=seed, confidence=confidence,
        class_confidence=confidence, class_family=family,
        candidate={k: _interval(mix(own["c"], k)[0], mix(draws["c"], k), confidence)
                   for k in keys},
        production={k: _interval(mix(own["p"], k)[0], mix(draws["p"], k), confidence)
                    for k in keys},
        difference={k: _interval(mix(own["c"], k)[0] - mix(own["p"], k)[0],
                                 mix(draws["c"], k) - mix(draws["p"], k), confidence)
                    for k in keys},
        sd={k: float(np.nanstd(mix(draws["c"], k) - mix(draws["p"], k))) for k in keys},
        classes=[],
    )


def compare_sets(sets: Sequence[SetMatches], resamples: int = 1000, seed: int = 0,
                 confidence: float = 0.95) -> SetsComparison:
    """Every set resampled within itself (set i with seed + i), each judged alone and all
    pooled; class differences of every set under one simultaneous band."""
    _check(resamples, confidence)
    if not sets:
        raise ValueError("no evaluation set to compare on")
    weights = [bootstrap_weights(len(s.candidate.image_ids), resamples, seed + i)
               for i, s in enumerate(sets)]
    boots = [_Boot(s.candidate, s.production, w) for s, w in zip(sets, weights)]
    # The family: every present class of every set; each studentised by its own spread.
    parts = []
    deviations = []
    for boot in boots:
        ks, est, draws = boot.class_differences()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            sd = np.nanstd(draws, axis=0)
        distinguished = np.isfinite(sd) & (sd > 0)
        for i in np.flatnonzero(distinguished).tolist():
            deviations.append(np.abs(draws[:, i] - est[i]) / sd[i])
        parts.append((ks, est, sd, distinguished))
    critical = _critical(deviations, confidence)
    family = len(deviations)
    results = {}
    for s, boot, (ks, est, sd, distinguished) in zip(sets, boots, parts):
        names = s.class_names
        classes = []
        for j, column in enumerate(ks.tolist()):
            cid = s.candidate.category_ids[column]
            half = critical * sd[j] if distinguished[j] else 0.0
            classes.append(ClassDifference(
                category_id=cid, name=names.get(cid, str(cid)),
                candidate=_interval(boot.ap_c[0, 0, column], boot.bs_c[:, 0, column],
                                    confidence),
                production=_interval(boot.ap_p[0, 0, column], boot.bs_p[:, 0, column],
                                     confidence),
                difference=Interval(estimate=float(est[j]), low=float(est[j] - half),
                                    high=float(est[j] + half)),
                distinguished=bool(distinguished[j]),
            ))
        results[s.name] = boot.result(len(s.candidate.image_ids), resamples, seed,
                                      confidence, classes, family)
    pooled = _pooled(boots, [len(s.candidate.image_ids) for s in sets], resamples, seed,
                     confidence, family)
    return SetsComparison(pooled=pooled, sets=results)
