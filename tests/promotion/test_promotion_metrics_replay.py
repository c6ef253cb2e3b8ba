"""Replay: recorded series in a real Prometheus, our queries, decide() on the answers.

Model-shaped (`model_requests_total`, `model_request_duration_seconds`),
HAProxy-shaped (the exporter's counters and the router's own
`mlops_router_response_seconds`) and Istio-shaped (`istio_requests_total`,
`istio_request_duration_milliseconds`)
series for a few scripted rollouts are written as OpenMetrics, loaded with
`promtool tsdb create-blocks-from openmetrics` and queried at the end of each
window. Nothing is faked: the PromQL (`last_over_time`, `resets`, `@`), the
raw samples the source differences and the histogram buckets are Prometheus's
own, and so is `increase()`'s extrapolation, which the exact counts avoid.
Istio's source-side series are recorded too, so a query that forgot
`reporter="destination"` would count every request twice.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import time

import pytest

from promotion.decision.analysis import decide
from promotion.decision.observations import histogram_quantile
from promotion.decision.policy import CanaryPolicy
from promotion.decision.state import dump_state_yaml, load_state, start_canary
from promotion.metrics.presets import QueryPreset
from promotion.metrics.prometheus import PrometheusSource
from tests.fixtures.prometheus import OpenMetrics, replay_prometheus

WINDOW = 30
TICK = 5
BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, math.inf)
POLICY = CanaryPolicy(min_requests=100, interval=WINDOW)
# Three hours back, on a whole hour: inside retention, clear of the empty head.
T0 = (int(time.time()) // 3600 - 3) * 3600


@dataclasses.dataclass(frozen=True)
class Window:
    """What traffic looked like for one analysis window of a scripted rollout."""

    weight: int
    rate: float = 50.0  # requests/s, both versions
    canary_errors: float = 0.002
    stable_errors: float = 0.002
    canary_p99_ms: float = 60.0
    stable_p99_ms: float = 60.0
    served: float | None = None  # share the canary really got (None: its weight)


QUIET = Window(weight=10, rate=0.0)


def fraction_below(le: float, p99_ms: float) -> float:
    """98 % of requests take ~8 ms; the slowest 2 % take p99_ms."""
    if math.isinf(le):
        return 1.0
    fast = 0.98 if le >= 0.01 else 0.0
    return 1.0 if le >= p99_ms / 1000 else fast


@dataclasses.dataclass
class Version:
    requests: float = 0.0
    errors: float = 0.0


def record(om: OpenMetrics, shape: str, model: str, windows: list[Window]) -> None:
    """Write counters for stable v1 and canary v2, one sample every TICK seconds."""
    versions = {"v1": Version(), "v2": Version()}
    for k, w in enumerate(windows):
        for tick in range(WINDOW // TICK):
            ts = T0 + k * WINDOW + (tick + 1) * TICK
            per_tick = w.rate * TICK
            for name, v in versions.items():
                canary = name == "v2"
                served = w.weight / 100 if w.served is None else w.served
                share = served if canary else 1 - served
                err = w.canary_errors if canary else w.stable_errors
                v.requests += per_tick * share
                v.errors += per_tick * share * err
                ok, bad = math.floor(v.requests - v.errors), math.floor(v.errors)
                p99 = w.canary_p99_ms if canary else w.stable_p99_ms
                buckets = {le: math.floor(v.requests * fraction_below(le, p99)) for le in BUCKETS_S}
                if shape == "model":
                    labels = {"model_name": model, "model_version": name}
                    for code, n in (("200", ok), ("500", bad)):
                        om.add("model_requests", "counter", "model_requests_total",
                               {**labels, "status_code": code}, ts, n)
                    for le, n in buckets.items():
                        om.add("model_request_duration_seconds", "histogram",
                               "model_request_duration_seconds_bucket",
                               {**labels, "le": "+Inf" if math.isinf(le) else str(le)}, ts, n)
                elif shape == "haproxy":
                    # Backend <model>, a server per version; no response_errors
                    # series at all, so the preset's `or vector(0)` is exercised.
                    labels = {"proxy": model, "server": name}
                    for code, n in (("2xx", ok), ("5xx", bad)):
                        om.add("haproxy_server_http_responses", "counter",
                               "haproxy_server_http_responses_total",
                               {**labels, "code": code}, ts, n)
                    om.add("haproxy_server_connection_errors", "counter",
                           "haproxy_server_connection_errors_total", labels, ts, 0)
                    # the router's own response times (local/platform/router_latency.lua)
                    for le, n in buckets.items():
                        om.add("mlops_router_response_seconds", "histogram",
                               "mlops_router_response_seconds_bucket",
                               {**labels, "le": "+Inf" if math.isinf(le) else str(le)}, ts, n)
                else:
                    for reporter in ("destination", "source"):
                        labels = {"reporter": reporter,
                                  "destination_workload": f"{model}-{name}",
                                  "destination_workload_namespace": "serving"}
                        for code, n in (("200", ok), ("503", bad)):
                            om.add("istio_requests", "counter", "istio_requests_total",
                                   {**labels, "response_code": code}, ts, n)
                        for le, n in buckets.items():
                            le_ms = "+Inf" if math.isinf(le) else f"{le * 1000:g}"
                            om.add("istio_request_duration_milliseconds", "histogram",
                                   "istio_request_duration_milliseconds_bucket",
                                   {**labels, "le": le_ms}, ts, n)


SCENARIOS = {
    # name: (shape, windows, expected (kind, cause, weight after) per window)
    "model-good-canary": ("model", [QUIET, Window(10), Window(25), Window(50), Window(100)], [
        ("hold", "insufficient-evidence", 10), ("step", "passed", 25), ("step", "passed", 50),
        ("step", "passed", 100), ("promote", "passed", 100)]),
    "model-traffic-lags": ("model", [Window(10), Window(10), Window(25)], [
        ("step", "passed", 25), ("hold", "insufficient-evidence", 25), ("step", "passed", 50)]),
    "istio-error-canary": ("istio", [Window(10), Window(25, canary_errors=0.08)], [
        ("step", "passed", 25), ("rollback", "verdict", 0)]),
    # 2 % of the canary's requests at 900 ms: the first window's 3 slow requests are
    # not enough alone, the second's are (the bound is stable's first window's p99).
    "istio-slow-canary": ("istio", [Window(10, canary_p99_ms=900.0)] * 2, [
        ("hold", "insufficient-evidence", 10), ("rollback", "verdict", 0)]),
    "model-canary-down": ("model", [Window(10, served=0.0), Window(10, served=0.0)], [
        ("hold", "insufficient-evidence", 10), ("rollback", "verdict", 0)]),
    "haproxy-error-canary": ("haproxy", [Window(10), Window(25, canary_errors=0.1)], [
        ("step", "passed", 25), ("rollback", "verdict", 0)]),
    # A canary slow where clients see it (stopped, queued): the router's histogram.
    "haproxy-slow-canary": ("haproxy", [Window(10, canary_p99_ms=900.0)] * 2, [
        ("hold", "insufficient-evidence", 10), ("rollback", "verdict", 0)]),
    "haproxy-good-canary": ("haproxy", [Window(10), Window(25), Window(50), Window(100)], [
        ("step", "passed", 25), ("step", "passed", 50), ("step", "passed", 100),
        ("promote", "passed", 100)]),
    "istio-good-canary": ("istio", [Window(10), Window(25), Window(50), Window(100)], [
        ("step", "passed", 25), ("step", "passed", 50), ("step", "passed", 100),
        ("promote", "passed", 100)]),
}


@pytest.fixture(scope="module")
def replay_url(tmp_path_factory: pytest.TempPathFactory):
    """One Prometheus with every scenario's series (one start-up for the module)."""

    om = OpenMetrics()
    for name, (shape, windows, _) in SCENARIOS.items():
        record(om, shape, name, windows)
    with replay_prometheus(om.text(), tmp_path_factory.mktemp("replay")) as url:
        yield url


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_replayed_rollout_gives_the_expected_decisions(scenario: str, replay_url: str) -> None:
    shape, windows, expected = SCENARIOS[scenario]
    source = PrometheusSource(replay_url, shape, namespace="serving")
    assert source.is_online()
    start = dt.datetime.fromtimestamp(T0, dt.timezone.utc)
    state = start_canary(scenario, "v1", "v2", windows[0].weight, start)
    got = []
    for k in range(len(windows)):
        at = start + dt.timedelta(seconds=(k + 1) * WINDOW)
        obs = source.observe(scenario, "v1", "v2", WINDOW, at=at)
        assert obs.fault is None, obs.fault
        decision = decide(POLICY, state, obs, at)
        got.append((decision.kind, decision.cause, decision.state.weight))
        state = load_state(dump_state_yaml(decision.state))  # as the controller would
    assert got == expected
    if "down" in scenario:
        assert "no traffic" in decision.reason and "down" in decision.reason


def test_observed_counts_match_what_was_recorded(replay_url: str) -> None:
    """Window 2 of the good model rollout: 1500 requests at 25 %, p99 ~60 ms, counted
    exactly (the recorded counters are floors of the running totals: canary 524 - 149
    answered, stable 2474 - 1349), where increase() stretches the 25 s between the
    window's first and last samples to 30 s and says up to 6/5 of it."""
    source = PrometheusSource(replay_url, "model")
    at = dt.datetime.fromtimestamp(T0 + 3 * WINDOW, dt.timezone.utc)
    obs = source.observe("model-good-canary", "v1", "v2", WINDOW, at=at)
    assert (obs.canary.requests, obs.stable.requests) == (375, 1125)
    assert obs.observed_share == pytest.approx(0.25, abs=0.01)
    assert obs.canary.latency is not None and obs.canary.latency[math.inf] > 0

    assert 0.025 < histogram_quantile(0.99, obs.canary.latency) <= 0.1
    istio = PrometheusSource(replay_url, "istio", namespace="serving")
    obs_i = istio.observe("istio-good-canary", "v1", "v2", WINDOW, at=at)
    # Milliseconds buckets are converted to seconds, source-side series ignored.
    assert obs_i.canary.latency is not None and 0.1 in obs_i.canary.latency
    assert obs_i.total_requests == 1500


def test_a_query_prometheus_refuses_is_a_fault(replay_url: str) -> None:
    broken = QueryPreset.from_mapping("custom", {
        "requests": 'sum(increase(x{a=~"("}[$window]))', "errors": "sum(increase(x[$window]))"})
    obs = PrometheusSource(replay_url, broken).observe("m", "v1", "v2", WINDOW)
    assert obs.fault is not None and "bad_data" in obs.fault


def test_versions_without_series_are_no_data_not_a_fault(replay_url: str) -> None:
    at = dt.datetime.fromtimestamp(T0 + 2 * WINDOW, dt.timezone.utc)
    obs = PrometheusSource(replay_url, "model").observe("nobody", "v1", "v2", WINDOW, at=at)
    assert obs.fault is None and obs.total_requests == 0
