"""Live per-version measures, now and over time: the one home of the rates people watch.

Requests per second, error share, p99, each quality signal's median and the router's live
weight, from the preset's own templates (`promotion/metrics/presets/*.yaml`), so the
demo's status line, the UI's numbers and its charts read what the controller reads:
:func:`live_queries` (pure), :class:`LiveReader.now` (instant queries) and
:class:`LiveReader.series` (range queries, `/api/v1/query_range`). A ratio over no
requests is None, never zero; Prometheus failing is a `MetricFault`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import requests

from promotion.decision.policy import CanaryPolicy
from promotion.metrics.presets import QueryPreset, get_preset, render_window
from promotion.metrics.prometheus import PrometheusSource
from serving.manifests import deployment_name

__all__ = ["RUNTIME_PRESETS", "LiveReader", "Series", "live_queries", "preset_of"]

#: The preset a policy gets when it names none, by the runtime the models run on: the
#: router's view of it (what clients see), `model` where there is none. `mlops controller
#: run` picks by where it reads readiness, `mlops ui` by `--runtime` or its platform.
RUNTIME_PRESETS = {"local": "haproxy", "kubernetes": "istio", "none": "model"}
#: The measures every preset gives, in the order they are shown.
MEASURES = ("rps", "error_share", "p99_ms")


def live_queries(preset: QueryPreset, model: str, version: str, window: float,
                 namespace: str = "default") -> dict[str, str]:
    """measure -> PromQL for one version over a trailing `window` of seconds (pure)."""
    values = {"model": model, "version": version, "workload": deployment_name(model, version),
              "namespace": namespace, "window": render_window(window)}
    requests_q = preset.render("requests", **values)
    errors_q = preset.render("errors", **values)
    out = {"rps": f"({requests_q}) / {window:g}",
           "error_share": f"({errors_q}) / ({requests_q})"}
    latency = preset.render("latency", **values)
    if latency is not None:
        out["p99_ms"] = f"histogram_quantile(0.99, {latency}) * {preset.latency_scale * 1000:g}"
    for signal, promql in preset.render_quality(**values).items():
        out[f"quality.{signal}"] = f"histogram_quantile(0.5, {promql})"
    weight = preset.render("weight", **values)
    if weight is not None:
        out["weight"] = weight
    return out


def _number(text: Any) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class Series:
    """Range answers on one time axis: `values[version][measure][i]` is at `times[i]`."""

    times: list[float]
    values: dict[str, dict[str, list[float | None]]]


class LiveReader:
    """Live measures of a model's versions from one Prometheus, through one preset."""

    def __init__(self, url: str, preset: QueryPreset | str = "model",
                 namespace: str = "default", timeout: float = 3.0,
                 session: requests.Session | None = None) -> None:
        self.source = PrometheusSource(url, preset, namespace=namespace, timeout=timeout,
                                       session=session)  # its HTTP and its faults
        self.preset = self.source.preset
        self.namespace = namespace

    def _get(self, path: str, params: dict[str, str], kind: str) -> list[dict[str, Any]]:
        return self.source.api(path, params, kind)

    def now(self, model: str, versions: Sequence[str], window: float = 30.0,
            at: float | None = None) -> dict[str, dict[str, float | None]]:
        """version -> measure -> its value now, or at unix time `at` (None: no data)."""
        out: dict[str, dict[str, float | None]] = {}
        for version in versions:
            row: dict[str, float | None] = {}
            for measure, promql in live_queries(self.preset, model, version, window,
                                                self.namespace).items():
                params = {"query": promql, **({"time": f"{at:.3f}"} if at is not None else {})}
                result = self._get("/api/v1/query", params, "vector")
                row[measure] = _number(result[0]["value"][1]) if result else None
            out[version] = row
        return out

    def series(self, model: str, versions: Sequence[str], start: float, end: float,
               step: float, window: float) -> Series:
        """Every measure of every version at `start, start+step, ... <= end`."""
        count = int((end - start) // step) + 1
        times = [round(start + i * step, 3) for i in range(count)]
        index = {t: i for i, t in enumerate(times)}
        values: dict[str, dict[str, list[float | None]]] = {}
        params = {"start": f"{start:.3f}", "end": f"{times[-1]:.3f}", "step": f"{step:g}"}
        for version in versions:
            values[version] = {}
            for measure, promql in live_queries(self.preset, model, version, window,
                                                self.namespace).items():
                column: list[float | None] = [None] * count
                for result in self._get("/api/v1/query_range", {**params, "query": promql},
                                        "matrix"):
                    for at, text in result.get("values") or []:
                        i = index.get(round(float(at), 3))
                        if i is not None:
                            column[i] = _number(text)
                values[version][measure] = column
        return Series(times, values)


def preset_of(policy: CanaryPolicy, default: str = "model") -> QueryPreset:
    """The preset a model's policy reads with (`metrics.preset`, its own `custom`
    queries, else the runtime's `default`), as the controller picks it."""
    name = policy.metrics.preset or default
    if name == "custom":
        return QueryPreset.from_mapping("custom", policy.metrics.queries or {})
    return get_preset(name)
