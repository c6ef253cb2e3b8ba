"""Exact counts from raw counter samples: what a window added to a counter. Pure, no I/O.

A window's count is the counter's last raw sample at or before the window's end minus
the one at or before its start, each reset's pieces added and a new series counted from
zero. `increase` is that arithmetic on one series' raw samples; `combine` applies it to
the three instant vectors `promotion/metrics/prometheus.py` reads. Why not PromQL's
`increase()`: docs/canary.md, "Exact counts".
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
