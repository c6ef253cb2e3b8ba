"""Prometheus as a metric source, over its HTTP API (`/api/v1/query`).

Each observation is a handful of instant queries (requests, errors, the
latency buckets and the model-quality buckets of each version) evaluated at
one `time`, so both versions are read over exactly the same window: the
comparison with stable is fair by construction. Anything that goes wrong on
the way (connection refused, timeout, HTTP error, `status: error`, a
non-vector answer) becomes `Observations.faulted(...)`; an empty vector is a
zero (no data).

`increase()` extrapolates, so counts come back as floats; they are rounded
to whole requests because the statistics count requests.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any, Sequence

import requests

from promotion.decision.observations import Histogram, Observations, VersionWindow
from promotion.metrics import batch
from promotion.metrics.presets import QueryKind, QueryPreset, get_preset, render_window
from serving.manifests import deployment_name

__all__ = ["MetricFault", "PrometheusSource"]


class MetricFault(RuntimeError):
    """The metric source could not answer (as opposed to answering "no data")."""


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

    def _scalar(self, promql: str, at: dt.datetime | None) -> int:
        total = 0.0
        for sample in self.query(promql, at):
            value = float(sample["value"][1])
            if not math.isnan(value):
                total += value
        return max(0, int(round(total)))

    def _histogram(self, promql: str, at: dt.datetime | None, scale: float = 1.0) -> Histogram:
        hist: Histogram = {}
        for sample in self.query(promql, at):
            le_text = sample.get("metric", {}).get("le")
            if le_text is None:
                raise MetricFault(f"histogram query returned a series without 'le': {promql}")
            value = float(sample["value"][1])
            le = math.inf if le_text in ("+Inf", "Inf", "inf") else float(le_text) * scale
            hist[le] = 0.0 if math.isnan(value) else value
        return dict(sorted(hist.items()))

    def _version(self, model: str, version: str, window: float,
                 at: dt.datetime | None) -> VersionWindow:
        q = self.queries(model, version, window)
        assert q["requests"] is not None and q["errors"] is not None
        latency = None if q["latency"] is None else self._histogram(
            q["latency"], at, self.preset.latency_scale)
        quality = {signal: self._histogram(promql, at)
                   for signal, promql in self.quality_queries(model, version, window).items()}
        classes_q = self.classes_query(model, version, window)
        classes = {} if classes_q is None else self._by_label(classes_q, "class", at)
        return VersionWindow(requests=self._scalar(q["requests"], at),
                             errors=self._scalar(q["errors"], at), latency=latency,
                             quality={k: v for k, v in quality.items() if v},
                             classes=classes if any(classes.values()) else {})

    def _by_label(self, promql: str, label: str, at: dt.datetime | None) -> dict[str, float]:
        out: dict[str, float] = {}
        for sample in self.query(promql, at):
            key = sample.get("metric", {}).get(label)
            if key is None:  # not a per-class series (an older server, a custom query):
                continue     # the class mix is unmeasured, the window is not a fault
            value = float(sample["value"][1])
            out[str(key)] = 0.0 if math.isnan(value) else value
        return dict(sorted(out.items()))

    def observe(self, model: str, stable: str, canary: str, window: float,
                at: dt.datetime | None = None) -> Observations:
        """Both versions over the same `window` seconds ending at `at`."""
        try:
            return Observations(stable=self._version(model, stable, window, at),
                                canary=self._version(model, canary, window, at),
                                window_seconds=window)
        except MetricFault as exc:
            return Observations.faulted(str(exc), window_seconds=window)

    def observe_many(self, wanted: Sequence[tuple[str, str, str, float, dt.datetime]]
                     ) -> list[Observations | None]:
        """`observe(model, stable, canary, window, at)` for each of `wanted`, in one query
        per signal (`promotion/metrics/batch.py`) instead of twelve per model.

        Each answer is parsed by the very code `observe` runs, from the very vectors
        the per-model queries return, so the observations are identical. None for all
        when a batched query fails: the caller asks per model, whose faults say which."""
        legs: dict[str, dict[tuple[str, float, float], None]] = {}  # signal -> legs
        for model, stable, canary, window, at in wanted:
            for version in (stable, canary):
                for signal, promql in self._signals(model, version, window).items():
                    legs.setdefault(signal, {})[(promql, at.timestamp(), window)] = None
        answers: dict[tuple[str, float], list[dict[str, Any]]] = {}
        try:
            for signal in sorted(legs):
                answers.update(self._answer(list(legs[signal])))
        except (MetricFault, ValueError):
            return [None] * len(wanted)
        replay = _Answered(self, answers)
        return [replay.observe(*w) for w in wanted]

    def _signals(self, model: str, version: str, window: float) -> dict[str, str]:
        """Every query `_version` runs for one version, by signal."""
        out = {k: q for k, q in self.queries(model, version, window).items() if q is not None}
        out.update({f"quality.{k}": q
                    for k, q in self.quality_queries(model, version, window).items()})
        classes = self.classes_query(model, version, window)
        if classes is not None:
            out["classes"] = classes
        return out

    def _answer(self, legs: list[tuple[str, float, float]]
                ) -> dict[tuple[str, float], list[dict[str, Any]]]:
        """One signal's legs (query, window end, window): every leg that can be pinned to
        its window end in one query, the others in one query per window end."""
        groups: dict[float | None, list[tuple[str, float, str]]] = {}
        for promql, at, window in legs:
            text = render_window(window)
            if f"[{text}]" in promql and batch.pinnable(promql, text):
                groups.setdefault(None, []).append((promql, at, batch.pin(promql, text, at)))
            else:
                groups.setdefault(at, []).append((promql, at, promql))
        out: dict[tuple[str, float], list[dict[str, Any]]] = {}
        for when, group in groups.items():
            time = max(at for _, at, _ in group) if when is None else when
            params = {"query": batch.combine([leg for _, _, leg in group]),
                      "time": f"{time:.3f}"}
            parts = batch.split(self.api("/api/v1/query", params, "vector", method="POST"),
                                len(group))
            out.update({(promql, at): part for (promql, at, _), part in zip(group, parts)})
        return out

    def is_online(self) -> bool:
        """True when Prometheus says it is ready."""
        try:
            return self.session.get(f"{self.url}/-/ready", timeout=self.timeout).status_code == 200
        except requests.RequestException:
            return False


class _Answered(PrometheusSource):
    """A source whose queries were answered already (`observe_many`): `observe` parses them."""

    def __init__(self, source: PrometheusSource,
                 answers: dict[tuple[str, float], list[dict[str, Any]]]) -> None:
        self.__dict__.update(source.__dict__)
        self.answers = answers

    def query(self, promql: str, at: dt.datetime | None = None) -> list[dict[str, Any]]:
        assert at is not None
        return self.answers[(promql, at.timestamp())]
