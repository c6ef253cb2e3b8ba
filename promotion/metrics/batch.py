"""Many instant vectors in one PromQL query: the query text, and its answer split back.

Each vector becomes one leg tagged by `label_replace(<leg>, "mlops_leg", "<i>", "", "")`,
the legs joined with `or`, and the answer split back by the tag into the vectors the
legs would have returned alone (prometheus/prometheus, docs/querying/functions.md and
operators.md). Pure: no I/O; `promotion/metrics/prometheus.py` sends what this builds.
Why: docs/inside-promotion.md.
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
