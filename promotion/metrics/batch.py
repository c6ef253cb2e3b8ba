"""Many models' windows in one PromQL query per signal: the query text, and its answer split back.

A pass with K canaries in analysis used to send K x 2 versions x 6 signals
instant queries (issue 31). Here each version's query -- rendered exactly as
`PrometheusSource` renders it alone, so any preset works, `custom` included --
becomes one *leg*: `label_replace(<leg>, "mlops_leg", "<i>", "", "")` tags every
sample of the leg's answer, and the legs are joined with `or`. The legs' label
sets differ by the tag, so `or` keeps every sample of every leg, and the answer
splits back into the very vectors the legs would have returned alone.

Windows are aligned per model, so their ends differ: a leg is evaluated at its
own window end with PromQL's `@` modifier, pinned on each of its range selectors
(`[60s] @ 1700000000.000`). That is exact only when every selector of the leg is
such a range selector; a leg with anything else (an instant selector, another
range, `offset`) is not pinned but sent in a query of its own window end
(`time=`), as before. Upstream semantics relied on (prometheus/prometheus,
docs/querying/): `label_replace` with an empty source label and regex adds the
label (functions.md), `or` is the union of label sets (operators.md), `@ <unix
time>` fixes a selector's evaluation time (basics.md, on by default since 2.33).

Pure: no I/O; `promotion/metrics/prometheus.py` sends what this builds.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

__all__ = ["LEG_LABEL", "combine", "pin", "pinnable", "split"]

LEG_LABEL = "mlops_leg"

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
_MATCHERS = re.compile(r"\{[^{}]*\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_OPERATORS = frozenset({"or", "and", "unless", "bool", "by", "without", "on", "ignoring",
                        "group_left", "group_right", "inf", "nan"})
_WORD = re.compile(r"[A-Za-z_:][\w:]*")


def pinnable(promql: str, window: str) -> bool:
    """True when every selector of `promql` is a range selector `[window]` (so `pin` is exact)."""
    text = _STRING.sub('""', promql)
    if "@" in text or re.search(r"\boffset\b", text):
        return False
    text = _GROUPING.sub("", text)
    ranges = f"[{window}]"
    if text.count("[") != text.count(ranges):  # another range, or a subquery
        return False
    text = _MATCHERS.sub("", text).replace(ranges, "\x00")
    for word in _WORD.finditer(text):
        rest = text[word.end():].lstrip()
        if rest.startswith("(") or word.group().lower() in _OPERATORS:
            continue  # a function, an aggregation, a keyword
        if not rest.startswith("\x00"):
            return False  # a selector evaluated at the query's time, not the leg's
    return True


def pin(promql: str, window: str, at: float) -> str:
    """`promql` with each `[window]` range evaluated at unix time `at` (see `pinnable`)."""
    return promql.replace(f"[{window}]", f"[{window}] @ {at:.3f}")


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
