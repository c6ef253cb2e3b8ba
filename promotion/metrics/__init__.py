"""Metric sources: where a window of canary and stable observations comes from.

One small Protocol (principles §5, after Flagger's two-method metrics provider):
`observe` returns both versions' counts for one window, or an `Observations`
whose `fault` says why it could not; `is_online` is a cheap health check for
the controller's startup and `/metrics`. Backends live one per module
(`prometheus.py`); the PromQL they run is data in `presets/`.

A source never raises for a failed query: a fault is an observation the
decision counts against its fault budget (principles §10), while "the query
answered with no series" is an honest zero, i.e. no data.
"""

from __future__ import annotations

import datetime as dt
from typing import Protocol, runtime_checkable

from promotion.decision.observations import Observations

__all__ = [
    "MetricSource",  # the protocol a metric source keeps
    "live",          # live per-version rates, now and over time (UI, demo)
    "presets",       # PromQL presets kept as data, found by name
    "probe",         # HttpProbe: the paired answers probe
    "prometheus",    # PrometheusSource: Prometheus as a metric source
]


@runtime_checkable
class MetricSource(Protocol):
    """Reads one analysis window for a model's stable and canary versions."""

    def observe(self, model: str, stable: str, canary: str, window: float,
                at: dt.datetime | None = None) -> Observations:
        """Counts of both versions over the `window` seconds ending at `at` (default: now)."""
        ...

    def is_online(self) -> bool:
        """True when the source answers at all."""
        ...
