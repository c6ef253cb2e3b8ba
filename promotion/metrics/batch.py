"""Many instant vectors in one PromQL query: the query text, and its answer split back.

A pass with K canaries in analysis used to send K x 2 versions x 6 signals
instant queries (issue 31). Each vector the source needs -- a counter's last
sample at a window's end, at its start, its resets (`promotion/metrics/prometheus.py`),
every one pinned to its own time with the `@` modifier -- becomes one *leg*:
`label_replace(<leg>, "mlops_leg", "<i>", "", "")` tags every sample of the
leg's answer, and the legs are joined with `or`. The legs' label sets differ by
the tag, so `or` keeps every sample of every leg, and the answer splits back
into the very vectors the legs would have returned alone. Upstream semantics
relied on (prometheus/prometheus, docs/querying/): `label_replace` with an
empty source label and regex adds the label (functions.md), `or` is the union
of label sets (operators.md).

Pure: no I/O; `promotion/metrics/prometheus.py` sends what this builds.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["LEG_LABEL", "combine", "split"]

LEG_LABEL = "mlops_leg"


def combine(legs: Sequence[str]) -> str:
    """One query answering every leg, each sample tagged with its leg's index."""
    if not legs:
        raise ValueError("no legs to combine")
    return " or ".join(f'label_replace({leg}, "{LEG_LABEL}", "{i}", "", "")'
                       for i, leg in enumerate(legs))


def split(samples: Sequence[dict[str, Any]], count: int) -> list[list[dict[str, Any]]]:
    """The combined answer as `count` vectors, one per leg, without the tag."""
    out: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    for sample in samples:
        metric = dict(sample.get("metric") or {})
        leg = metric.pop(LEG_LABEL, None)
        if leg is None or not leg.isdigit() or int(leg) >= count:
            raise ValueError(f"a sample without a known {LEG_LABEL} label: {metric}")
        out[int(leg)].append({**sample, "metric": metric})
    return out
