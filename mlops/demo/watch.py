"""What the demo shows while a canary moves: weight, traffic, errors and p99 per version.

Weights come from HAProxy (via `mlops status`'s data); the rest from the platform's
Prometheus through `promotion.metrics.live`, the one home of the live rates (the UI
reads the same), with the preset the demo's controller judges by (`--preset`, else
the local router's view, `haproxy`), in a short trailing window so the numbers move
with the traffic.
"""

import dataclasses
import math
from typing import Any

from promotion.errors import MetricFault
from promotion.metrics.live import LiveReader

WINDOW = 30.0
#: The controller's preset on the local platform when the demo names none.
DEFAULT_PRESET = "haproxy"

Measures = dict[str, dict[str, float | None]]


@dataclasses.dataclass(frozen=True)
class VersionView:
    """One version's line on screen."""

    version: str
    role: str  # stable | canary | other
    weight: int | None
    rps: float | None
    error_rate: float | None
    p99_ms: float | None


def views(measures: Measures, weights: dict[str, int | None],
          stable: str | None, candidate: str | None) -> list[VersionView]:
    """Join weights and measures (version -> rps, error_share, p99_ms) into one view per
    version, stable first (pure)."""
    names = sorted(set(weights) | set(measures),
                   key=lambda v: (v != stable, v != candidate, v))
    out = []
    for version in names:
        m = measures.get(version, {})
        rps = m.get("rps")
        role = "stable" if version == stable else "canary" if version == candidate else "other"
        if role == "other" and not weights.get(version) and not rps:
            continue  # a rolled-back version that has drained: not worth a column
        out.append(VersionView(version, role, weights.get(version), rps,
                               m.get("error_share", 0.0 if rps == 0 else None), m.get("p99_ms")))
    return out


def _num(value: float | None, fmt: str, unit: str = "") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else format(value, fmt) + unit


def render(rows: list[VersionView]) -> str:
    """One status line: `v-abc stable 90% 36 rps err 0.0% p99 4.1ms | ...` (pure)."""
    parts = []
    for row in rows:
        weight = "-" if row.weight is None else f"{row.weight}%"
        err = None if row.error_rate is None else row.error_rate * 100
        parts.append(f"{row.version} {row.role} {weight:>4} "
                     f"{_num(row.rps, '.1f', ' rps')}  err {_num(err, '.1f', '%')}  "
                     f"p99 {_num(row.p99_ms, '.0f', ' ms')}")
    return " | ".join(parts) if parts else "(no traffic yet)"


def observe(prometheus: str, model: str, versions: Any, preset: str | None = None) -> Measures:
    """The current measures of `versions`; empty when Prometheus cannot answer."""
    try:
        return LiveReader(prometheus, preset or DEFAULT_PRESET).now(model, sorted(versions),
                                                                    WINDOW)
    except MetricFault:
        return {}


def weights_of(status: dict[str, Any], model: str) -> dict[str, int | None]:
    """HAProxy's weight per version from `lifecycle.status()` (pure)."""
    versions = status.get("models", {}).get(model, {}).get("versions", {})
    return {v: info.get("haproxy_weight") for v, info in versions.items()}
