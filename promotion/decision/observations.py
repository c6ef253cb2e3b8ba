"""What a metric source saw in one analysis window: plain data, no I/O.

Per version: requests, errors (5xx and the router's own failures), a
latency histogram as Prometheus keeps it (cumulative buckets, upper bound in
seconds -> count, `inf` included) and the same kind of histogram for each
model-quality signal the source reads (what the model answered). The
observed traffic share is derived from the request counts unless the source
measured it separately.

A `fault` (the metric source failed: Prometheus down, a broken query) is a
different thing from "no data" (the source answered, nobody sent requests):
the first is our problem, the second is the world's, and `decide()` treats
them differently (principles §10). A faulted `Observations` carries no numbers.
"""

from __future__ import annotations

import math
from typing import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

__all__ = [
    "Histogram",
    "Observations",
    "PairedAnswers",
    "VersionWindow",
    "count_above",
    "histogram_quantile",
    "merge_histograms",
]

Histogram = dict[float, float]
"""Cumulative latency buckets: upper bound in seconds (`math.inf` last) -> count."""


class VersionWindow(BaseModel):
    """One version's counts in one window."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: int = Field(default=0, ge=0)
    errors: int = Field(default=0, ge=0)
    latency: Histogram | None = None
    """None: the source has no latency histogram (e.g. the haproxy preset)."""
    quality: dict[str, Histogram] = Field(default_factory=dict)
    """What the model answered, per signal (`detections_per_image`, `top_score`):
    cumulative buckets of the signal's value -> answers. Empty: not measured."""
    classes: dict[str, float] = Field(default_factory=dict)
    """Detections by class name (the model's classes and `other`). Empty: not measured."""

    @field_validator("errors")
    @classmethod
    def _errors(cls, errors: int, info: ValidationInfo) -> int:
        # A preset's errors may count what its requests do not (HAProxy's response
        # errors, read after the server answered): a rate above 1 means nothing.
        requests = info.data.get("requests", errors)
        return min(errors, int(requests))

    @property
    def latency_count(self) -> int:
        """Number of requests in the histogram (its `+Inf` bucket)."""
        if not self.latency:
            return 0
        return int(round(max(self.latency.values())))


class PairedAnswers(BaseModel):
    """What one probe found: both versions' answers on the same images, compared.

    `error` set: the probe could not be made (no probe set shipped, a version
    unreachable); the counts then mean nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    images: int = Field(default=0, ge=0)
    stable_boxes: int = Field(default=0, ge=0)
    canary_boxes: int = Field(default=0, ge=0)
    matched: int = Field(default=0, ge=0)
    relabelled: int = Field(default=0, ge=0)
    pairs: dict[str, int] = Field(default_factory=dict)
    """Relabelled pairs by `stable label -> canary label`, for the reason."""
    matched_images: int = Field(default=0, ge=0)
    """Images with at least one matched pair: the check's units."""
    renamed_images: int = Field(default=0, ge=0)
    """Of those, images where most matched pairs carry another label."""
    classes: dict[str, tuple[int, int]] = Field(default_factory=dict)
    """Per stable class: (images with a matched box of it, of those renamed by majority)."""
    error: str | None = None

    @classmethod
    def failed(cls, why: str) -> PairedAnswers:
        """A probe that could not be made, with the reason."""
        return cls(error=why or "probe failed")


class Observations(BaseModel):
    """Canary and stable in the same window, or a fault."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    canary: VersionWindow = VersionWindow()
    stable: VersionWindow = VersionWindow()
    window_seconds: float = Field(default=30.0, gt=0)
    canary_share: float | None = Field(default=None, ge=0, le=1)
    """Measured share of traffic on the canary; None: derived from requests."""
    fault: str | None = None
    """Why the metric source failed; when set, the numbers mean nothing."""
    answers: PairedAnswers | None = None
    """The paired probe of this window (`promotion/decision/answers.py`), made by the controller
    beside the metric source; None: not probed."""

    @classmethod
    def faulted(cls, reason: str, window_seconds: float = 30.0) -> Observations:
        """Observations for a window the source could not read."""
        return cls(fault=reason or "metric source failed", window_seconds=window_seconds)

    @property
    def total_requests(self) -> int:
        """Requests to both versions."""
        return self.canary.requests + self.stable.requests

    @property
    def observed_share(self) -> float | None:
        """Canary share of requests in the window; None when there were none."""
        if self.canary_share is not None:
            return self.canary_share
        if self.total_requests == 0:
            return None
        return self.canary.requests / self.total_requests


def merge_histograms(a: Mapping[float, float] | None, b: Mapping[float, float] | None) -> Histogram:
    """Bucket-wise sum of two cumulative histograms (missing buckets count as 0)."""
    out: Histogram = {}
    for hist in (a or {}, b or {}):
        for le, count in hist.items():
            out[float(le)] = out.get(float(le), 0.0) + float(count)
    return dict(sorted(out.items()))


def histogram_quantile(q: float, hist: Mapping[float, float] | None) -> float | None:
    """The q-quantile in seconds, interpolated like PromQL's `histogram_quantile`.

    None when the histogram is empty. A quantile in the `+Inf` bucket returns
    the highest finite bound (as Prometheus does): a lower bound, which is what
    a "p99 <= limit" check needs to stay honest.
    """
    if not hist:
        return None
    buckets = sorted((float(le), float(c)) for le, c in hist.items())
    # Cumulative counts can dip through scrape jitter; PromQL fixes that by
    # taking the running maximum, and so do we.
    fixed: list[tuple[float, float]] = []
    running = 0.0
    for le, count in buckets:
        running = max(running, count)
        fixed.append((le, running))
    total = fixed[-1][1]
    if total <= 0:
        return None
    if not math.isinf(fixed[-1][0]):
        fixed.append((math.inf, total))
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for le, count in fixed:
        if count >= rank:
            if math.isinf(le):
                finite = [b for b, _ in fixed if not math.isinf(b)]
                return finite[-1] if finite else None
            if count == lower_count:
                return le
            return lower_bound + (le - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = le, count
    return None


def count_above(hist: Mapping[float, float] | None, seconds: float,
                bounds: list[float] | None = None) -> tuple[int, int] | None:
    """(requests slower than the first bucket bound >= `seconds`, all requests).

    Rounding the bound *up* to a bucket edge undercounts slow requests, which
    keeps a "more than x % are slower than L" test conservative. None when the
    histogram is empty or no finite bound reaches `seconds`.
    `bounds` (sorted finite bucket bounds) lets both versions use one edge.
    """
    if not hist:
        return None
    finite = bounds if bounds is not None else sorted(le for le in hist if not math.isinf(le))
    edge = next((b for b in finite if b >= seconds - 1e-12), None)
    if edge is None:
        return None
    total = max(hist.values())
    below = max((c for le, c in hist.items() if le <= edge + 1e-12), default=0.0)
    return int(round(max(total - below, 0.0))), int(round(total))
