"""Exact counts from raw counter samples: what a window added to a counter. Pure, no I/O.

Why not `increase()`: Prometheus extrapolates it. It takes the first and last
samples inside the range and stretches their difference to the whole range
(`extrapolatedRate` in prometheus/prometheus `promql/functions.go`;
prometheus#1245, #3746). With a 60 s window and the usual 30 s scrape a range
holds two samples 30 s apart, and their difference is doubled: every window
reports about twice its requests. The sequential tests' log likelihood ratio
is linear in the counts, so the e-value they report is about the square of a
valid one, and a healthy canary held an hour was rolled back 4.7 % of the
time where 1 % was stated. At a 1 s scrape and a 10 s window (the local
platform) the stretch is small, which is why no local run showed it.

What is exact instead: a counter's value at the window's end minus its value
at the window's start, both read as the last raw sample at or before each
end. Windows are aligned end to end (the controller's), so each request is
counted in exactly one window: the one whose end first sees the scrape that
counted it. A counter that went down restarted from zero (a restarted
process); what it counted before the restart was seen by the samples before
it, and from the restart on it counts from zero, so each piece is added
(Prometheus' own reset rule in `resets()` and `increase()`). A series
without a sample before the window began is new: it started at zero, so its
whole value is the window's.

The metric source reads, per counter selector, three instant vectors per
window (`promotion/metrics/prometheus.py`): the last sample at the end, the
last at the start, and the number of resets across both; only a series that
reset (or vanished) needs its raw samples, asked for separately. `increase`
below is that arithmetic on one series' raw samples; `combine` applies it to
the three vectors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["combine", "increase"]

Labels = tuple[tuple[str, str], ...]
"""A series' labels, sorted (the metric name dropped, as PromQL functions drop it)."""


def increase(before: float | None, samples: Sequence[float]) -> float:
    """What one counter series added over a window.

    `before`: its last raw value at or before the window's start (None: the series
    did not exist yet, i.e. it started at 0); `samples`: its raw values inside the
    window, in time order. A value below the previous one is a reset."""
    total, previous = 0.0, 0.0 if before is None else float(before)
    for value in samples:
        value = float(value)
        total += value if value < previous else value - previous
        previous = value
    return total


def combine(end: Mapping[Labels, float], start: Mapping[Labels, float],
            resets: Mapping[Labels, float]) -> tuple[dict[Labels, float], list[Labels]]:
    """Per-series increases from the last samples at the window's end and at its start
    (each looked up over a lookback at least the window long, so a series with a sample
    in the window is in `end`) and the series' resets around them; and the series whose
    increase these cannot give (one that reset), which need their raw samples. A series
    only in `start` stopped before the window: it added nothing."""
    out: dict[Labels, float] = {}
    raw: list[Labels] = []
    for labels in sorted(end):
        if resets.get(labels, 0.0) > 0 or (labels in start and end[labels] < start[labels]):
            raw.append(labels)
            continue
        out[labels] = increase(start.get(labels), [end[labels]])
    return out, raw
