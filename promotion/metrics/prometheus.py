"""Prometheus as a metric source, over its HTTP API (`/api/v1/query`).

Every counted signal of a preset is a sum of counters; the source reads those counters'
raw values at both ends of the window (`last_over_time` and `resets`, pinned with `@`)
and differences them itself (`promotion/metrics/counters.py`), never `increase()`.
Both versions, and with `observe_many` every model of a pass, are read in one query
(chunks of `MAX_LEGS` legs). Anything that goes wrong on the way becomes
`Observations.faulted(...)`; an empty vector is a zero. Why: docs/inside-promotion.md.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any, Sequence

import requests

from promotion.decision.observations import Histogram, Observations, VersionWindow
from promotion.errors import MetricFault
from promotion.metrics import batch, counters
from promotion.metrics.presets import (
    QueryKind,
    QueryPreset,
    counter_selectors,
    get_preset,
    render_window,
)
from serving.manifests import deployment_name

__all__ = ["LOOKBACK", "MAX_LEGS", "PrometheusSource"]

LOOKBACK = 300.0
"""Seconds a window's end looks back for a series' last sample (at least the window):
Prometheus' own default lookback, far above any scrape interval in use."""

MAX_LEGS = 300
"""Instant vectors asked in one query (a model's two versions need about 50)."""

_Job = tuple[int, str, str, str, float, float]
"""(which window, version, signal, counter selector, window seconds, window end)."""


def _workload(model: str, version: str) -> str:
    # The Deployment name is the serving room's to define; ask it.
    return deployment_name(model, version)


class PrometheusSource:
    """`MetricSource` over a Prometheus server's query API."""

    def __init__(self, url: str, preset: QueryPreset | str = "model", namespace: str = "default",
                 timeout: float = 5.0, session: requests.Session | None = None) -> None:
        self.url = url.rstrip("/")
        self.preset = get_preset(preset) if isinstance(preset, str) else preset
        self.namespace = namespace
        self.timeout = timeout
        self.session = session or requests.Session()

    def queries(self, model: str, version: str, window: float) -> dict[str, str | None]:
        """The rendered queries for one version (what tests pin)."""
        values = {"model": model, "version": version, "workload": _workload(model, version),
                  "namespace": self.namespace, "window": render_window(window)}
        kinds: tuple[QueryKind, ...] = ("requests", "errors", "latency")
        return {kind: self.preset.render(kind, **values) for kind in kinds}

    def classes_query(self, model: str, version: str, window: float) -> str | None:
        """The rendered class-count query for one version (None: the preset has none)."""
        return self.preset.render_classes(
            model=model, version=version, workload=_workload(model, version),
            namespace=self.namespace, window=render_window(window))

    def quality_queries(self, model: str, version: str, window: float) -> dict[str, str]:
        """The rendered model-quality queries for one version."""
        return self.preset.render_quality(
            model=model, version=version, workload=_workload(model, version),
            namespace=self.namespace, window=render_window(window))

    def query(self, promql: str, at: dt.datetime | None = None) -> list[dict[str, Any]]:
        """Run one instant query; the result vector, or MetricFault."""
        params: dict[str, str] = {"query": promql}
        if at is not None:
            params["time"] = f"{at.timestamp():.3f}"
        return self.api("/api/v1/query", params, "vector")

    def api(self, path: str, params: dict[str, str], kind: str,
            method: str = "GET") -> list[dict[str, Any]]:
        """GET one query endpoint (`/api/v1/query`, `/api/v1/query_range`); its result of
        type `kind` (`vector`, `matrix`), or MetricFault. POST sends the parameters as a
        form (the API takes both; a batched query outgrows a URL)."""
        try:
            if method == "POST":
                resp = self.session.post(f"{self.url}{path}", data=params, timeout=self.timeout)
            else:
                resp = self.session.get(f"{self.url}{path}", params=params,
                                        timeout=self.timeout)
        except requests.RequestException as exc:
            raise MetricFault(f"prometheus at {self.url} unreachable: {exc}") from None
        try:
            body = resp.json()
        except ValueError:
            raise MetricFault(f"prometheus answered HTTP {resp.status_code} without JSON") from None
        if resp.status_code != 200 or body.get("status") != "success":
            raise MetricFault(f"prometheus query failed (HTTP {resp.status_code}): "
                              f"{body.get('errorType', '')} {body.get('error', '')}".strip())
        data = body.get("data") or {}
        if data.get("resultType") != kind:
            raise MetricFault(f"expected a {kind}, got {data.get('resultType')!r} for "
                              f"{params.get('query')}")
        return list(data.get("result") or [])

    def reads(self, model: str, version: str, window: float) -> dict[str, list[str]]:
        """signal -> the counter selectors it adds up (`requests`, `errors`, `latency`,
        `quality.<signal>`, `classes`): what `observe` reads for one version."""
        text = render_window(window)
        out = {}
        for signal, promql in self._signals(model, version, window).items():
            selectors = counter_selectors(promql, text)
            if selectors is None:  # presets are checked when loaded; say so if one slips by
                raise MetricFault(f"query {signal!r} is not a sum of increase() over "
                                  f"[{text}]: {promql}")
            out[signal] = selectors
        return out

    def _signals(self, model: str, version: str, window: float) -> dict[str, str]:
        """Every counted query of one version, by signal."""
        out = {k: q for k, q in self.queries(model, version, window).items() if q is not None}
        out.update({f"quality.{k}": q
                    for k, q in self.quality_queries(model, version, window).items()})
        classes = self.classes_query(model, version, window)
        if classes is not None:
            out["classes"] = classes
        return out

    def observe(self, model: str, stable: str, canary: str, window: float,
                at: dt.datetime | None = None) -> Observations:
        """Both versions over the `window` seconds ending at `at` (default: now)."""
        at = at or dt.datetime.now(dt.timezone.utc)
        try:
            return self._observe_all([(model, stable, canary, window, at)])[0]
        except MetricFault as exc:
            return Observations.faulted(str(exc), window_seconds=window)

    def observe_many(self, wanted: Sequence[tuple[str, str, str, float, dt.datetime]]
                     ) -> list[Observations | None]:
        """`observe(model, stable, canary, window, at)` for each of `wanted`, in one query
        (per `MAX_LEGS` legs) instead of one per model, each window at its own end.

        The answers are added up by the very code `observe` runs, so the observations
        are identical. None for all when a query fails: the caller asks per model,
        whose faults say which."""
        try:
            return list(self._observe_all(wanted))
        except (MetricFault, ValueError):
            return [None] * len(wanted)

    def _observe_all(self, wanted: Sequence[tuple[str, str, str, float, dt.datetime]]
                     ) -> list[Observations]:
        jobs: list[_Job] = []
        legs: list[str] = []
        for i, (model, stable, canary, window, at) in enumerate(wanted):
            end = at.timestamp()
            look = max(window, LOOKBACK)
            last, span = render_window(look), render_window(window + look)
            for version in (stable, canary):
                for signal, selectors in self.reads(model, version, window).items():
                    for selector in selectors:
                        jobs.append((i, version, signal, selector, window, end))
                        legs += [f"last_over_time({selector}[{last}] @ {end:.3f})",
                                 f"last_over_time({selector}[{last}] @ {end - window:.3f})",
                                 f"resets({selector}[{span}] @ {end:.3f})"]
        vectors = self._ask(legs, max((w[4].timestamp() for w in wanted), default=0.0))
        sums: dict[tuple[int, str, str], dict[str, float]] = {}
        for j, (i, version, signal, selector, window, end) in enumerate(jobs):
            at_end, at_start, resets = (_by_labels(v) for v in vectors[3 * j:3 * j + 3])
            added, raw = counters.combine(at_end, at_start, resets)
            if raw:
                added.update(self._raw(selector, raw, window, end))
            group = sums.setdefault((i, version, signal), {})
            for labels, value in added.items():
                key = _group_key(signal, dict(labels), selector)
                if key is not None:
                    group[key] = group.get(key, 0.0) + value
        out = []
        for i, (model, stable, canary, window, _) in enumerate(wanted):
            signals = self.reads(model, stable, window)
            out.append(Observations(stable=self._window(sums, i, stable, signals),
                                    canary=self._window(sums, i, canary, signals),
                                    window_seconds=window))
        return out

    def _window(self, sums: Mapping[tuple[int, str, str], dict[str, float]], i: int,
                version: str, signals: Mapping[str, list[str]]) -> VersionWindow:
        def total(signal: str) -> int:
            return max(0, int(round(sum(sums.get((i, version, signal), {}).values()))))

        def histogram(signal: str, scale: float = 1.0) -> Histogram:
            buckets = sums.get((i, version, signal), {})
            return dict(sorted((math.inf if le in ("+Inf", "Inf", "inf") else float(le) * scale,
                                float(round(count))) for le, count in buckets.items()))

        latency = histogram("latency", self.preset.latency_scale) if "latency" in signals \
            else None
        quality = {k.removeprefix("quality."): histogram(k) for k in signals
                   if k.startswith("quality.")}
        classes = {k: float(round(v)) for k, v in sorted(sums.get((i, version, "classes"),
                                                                   {}).items())}
        return VersionWindow(requests=total("requests"), errors=total("errors"),
                             latency=latency, quality={k: v for k, v in quality.items() if v},
                             classes=classes if any(classes.values()) else {})

    def _ask(self, legs: list[str], time: float) -> list[list[dict[str, Any]]]:
        """Each leg's instant vector, `MAX_LEGS` legs to a query."""
        out: list[list[dict[str, Any]]] = []
        for first in range(0, len(legs), MAX_LEGS):
            chunk = legs[first:first + MAX_LEGS]
            params = {"query": batch.combine(chunk), "time": f"{time:.3f}"}
            out += batch.split(self.api("/api/v1/query", params, "vector", method="POST"),
                               len(chunk))
        return out

    def _raw(self, selector: str, series: list[counters.Labels], window: float,
             end: float) -> dict[counters.Labels, float]:
        """The increase of `series` (they reset) from their raw samples around the window."""
        span = render_window(window + max(window, LOOKBACK))
        params = {"query": f"{selector}[{span}] @ {end:.3f}", "time": f"{end:.3f}"}
        wanted = set(series)
        out: dict[counters.Labels, float] = {}
        for item in self.api("/api/v1/query", params, "matrix"):
            labels = _labels(item.get("metric") or {})
            if labels not in wanted:
                continue
            points = [(float(ts), float(v)) for ts, v in item.get("values") or []]
            before = [v for ts, v in points if ts <= end - window]
            inside = [v for ts, v in points if end - window < ts <= end]
            out[labels] = counters.increase(before[-1] if before else None, inside)
        return out

    def is_online(self) -> bool:
        """True when Prometheus says it is ready."""
        try:
            return self.session.get(f"{self.url}/-/ready", timeout=self.timeout).status_code == 200
        except requests.RequestException:
            return False


def _labels(metric: Mapping[str, Any]) -> counters.Labels:
    return tuple(sorted((str(k), str(v)) for k, v in metric.items() if k != "__name__"))


def _by_labels(vector: list[dict[str, Any]]) -> dict[counters.Labels, float]:
    out = {}
    for sample in vector:
        value = float(sample["value"][1])
        out[_labels(sample.get("metric") or {})] = 0.0 if math.isnan(value) else value
    return out


def _group_key(signal: str, labels: Mapping[str, str], selector: str) -> str | None:
    """Where one series' increase is added: one total for requests and errors, its `le`
    for histograms, its `class` for the classes (None: a series without it)."""
    if signal in ("requests", "errors"):
        return ""
    if signal == "classes":
        return labels.get("class")  # an older server or a custom query: unmeasured, no fault
    if "le" not in labels:
        raise MetricFault(f"histogram series without 'le' for {selector}")
    return labels["le"]
