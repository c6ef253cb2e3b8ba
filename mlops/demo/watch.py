"""What the demo shows while a canary moves: weight, traffic, errors and p99 per version.

Weights come from HAProxy (via `mlops status`'s data), the rest from the
platform's Prometheus, over the model server's own series (the `model`
preset's metrics), in a short trailing window so the numbers move with
the traffic.
"""

import dataclasses
import math
from typing import Any

import requests

WINDOW = "30s"


@dataclasses.dataclass(frozen=True)
class VersionView:
    """One version's line on screen."""

    version: str
    role: str  # stable | canary | other
    weight: int | None
    rps: float | None
    error_rate: float | None
    p99_ms: float | None


def queries(model: str, window: str = WINDOW) -> dict[str, str]:
    """PromQL per measure, grouped by version (pure)."""
    sel = f'model_name="{model}"'
    return {
        "rps": f"sum by (model_version) (rate(model_requests_total{{{sel}}}[{window}]))",
        "errors": (f"sum by (model_version) "
                   f"(rate(model_requests_total{{{sel},status_code=~\"5..\"}}[{window}]))"),
        "p99": (f"histogram_quantile(0.99, sum by (model_version, le) "
                f"(rate(model_request_duration_seconds_bucket{{{sel}}}[{window}])))"),
    }


def _query(prometheus: str, promql: str) -> dict[str, float]:
    response = requests.get(f"{prometheus}/api/v1/query", params={"query": promql}, timeout=3)
    response.raise_for_status()
    out = {}
    for sample in response.json().get("data", {}).get("result", []):
        version = sample.get("metric", {}).get("model_version")
        if version:
            value = float(sample["value"][1])
            out[version] = value if math.isfinite(value) else math.nan
    return out


def views(measures: dict[str, dict[str, float]], weights: dict[str, int | None],
          stable: str | None, candidate: str | None) -> list[VersionView]:
    """Join weights and measures into one view per version, stable first (pure)."""
    names = sorted(set(weights) | set(measures.get("rps", {})),
                   key=lambda v: (v != stable, v != candidate, v))
    out = []
    for version in names:
        rps = measures.get("rps", {}).get(version)
        errors = measures.get("errors", {}).get(version, 0.0 if rps is not None else None)
        rate = errors / rps if rps and errors is not None else (0.0 if rps == 0 else None)
        p99 = measures.get("p99", {}).get(version)
        role = "stable" if version == stable else "canary" if version == candidate else "other"
        if role == "other" and not weights.get(version) and not rps:
            continue  # a rolled-back version that has drained: not worth a column
        out.append(VersionView(version, role, weights.get(version), rps, rate,
                               p99 * 1000 if p99 is not None and math.isfinite(p99) else None))
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


def observe(prometheus: str, model: str) -> dict[str, dict[str, float]]:
    """The current measures per version; empty measures when Prometheus cannot answer."""
    out: dict[str, dict[str, float]] = {}
    for name, promql in queries(model).items():
        try:
            out[name] = _query(prometheus, promql)
        except (requests.RequestException, ValueError, KeyError):
            out[name] = {}
    return out


def weights_of(status: dict[str, Any], model: str) -> dict[str, int | None]:
    """HAProxy's weight per version from `lifecycle.status()` (pure)."""
    versions = status.get("models", {}).get(model, {}).get("versions", {})
    return {v: info.get("haproxy_weight") for v, info in versions.items()}
