"""Metric presets: the rendered PromQL is pinned, the registry fails loudly.

The strings below are the contract with Prometheus: a change to a preset file
shows up here as a diff to review, not as a silently different canary
verdict. `test_promotion_metrics_replay.py` runs the same queries against a
real Prometheus.
"""

from __future__ import annotations

import datetime as dt

import pytest

from promotion.decision.analysis import decide
from promotion.decision.policy import CanaryPolicy, PolicyError, load_policy
from promotion.decision.state import start_canary
from promotion.metrics import MetricSource
from promotion.metrics.presets import (
    PRESET_NAMES,
    PresetError,
    QueryPreset,
    get_preset,
    render_window,
)
from promotion.metrics.prometheus import PrometheusSource
from tests.fixtures.common import free_port

PINNED = {
    "model": {
        "requests": 'sum(increase(model_requests_total{model_name="shapes-detector",'
                    'model_version="v2"}[30s]))',
        "errors": 'sum(increase(model_requests_total{model_name="shapes-detector",'
                  'model_version="v2",status_code=~"5.."}[30s]))',
        "latency": 'sum by (le) (increase(model_request_duration_seconds_bucket{'
                   'model_name="shapes-detector",model_version="v2"}[30s]))',
    },
    "istio": {
        "requests": 'sum(increase(istio_requests_total{reporter="destination",'
                    'destination_workload_namespace="serving",'
                    'destination_workload="shapes-detector-v2"}[30s]))',
        "errors": 'sum(increase(istio_requests_total{reporter="destination",'
                  'destination_workload_namespace="serving",'
                  'destination_workload="shapes-detector-v2",response_code=~"5.*"}[30s]))',
        "latency": 'sum by (le) (increase(istio_request_duration_milliseconds_bucket{'
                   'reporter="destination",destination_workload_namespace="serving",'
                   'destination_workload="shapes-detector-v2"}[30s]))',
    },
    "haproxy": {
        "requests": '(sum(increase(haproxy_server_http_responses_total{proxy="shapes-detector",'
                    'server="v2"}[30s])) or vector(0)) + (sum(increase('
                    'haproxy_server_connection_errors_total{proxy="shapes-detector",'
                    'server="v2"}[30s])) or vector(0))',
        "errors": '(sum(increase(haproxy_server_http_responses_total{proxy="shapes-detector",'
                  'server="v2",code="5xx"}[30s])) or vector(0)) + (sum(increase('
                  'haproxy_server_connection_errors_total{proxy="shapes-detector",'
                  'server="v2"}[30s])) or vector(0)) + (sum(increase('
                  'haproxy_server_response_errors_total{proxy="shapes-detector",'
                  'server="v2"}[30s])) or vector(0))',
        "latency": 'sum by (le) (increase(mlops_router_response_seconds_bucket{'
                   'proxy="shapes-detector",server="v2"}[30s]))',
    },
}
CLASSES = ('sum by (class) (increase(model_class_images_total{model_name="shapes-detector",'
           'model_version="v2"}[30s]))')


@pytest.mark.parametrize("preset", sorted(PINNED))
def test_rendered_queries_are_pinned(preset: str) -> None:
    source = PrometheusSource("http://127.0.0.1:9", preset, namespace="serving")
    assert source.queries("shapes-detector", "v2", 30) == PINNED[preset]
    # the class mix is the model server's own count in every preset: no router sees it
    assert source.classes_query("shapes-detector", "v2", 30) == CLASSES


def test_every_preset_file_is_pinned() -> None:
    assert PRESET_NAMES == set(PINNED)


def test_latency_units() -> None:
    assert get_preset("istio").latency_scale == 0.001
    assert get_preset("model").latency_scale == 1.0


def test_unknown_preset_fails_loudly_with_the_choices() -> None:
    with pytest.raises(PresetError, match="unknown metrics preset 'linkerd'.*haproxy, istio, mod"):
        get_preset("linkerd")
    with pytest.raises(PolicyError, match=r"promotion\.canary\.metrics.*'linkerd'"):
        load_policy({"metrics": {"preset": "linkerd"}})


def test_custom_queries_from_the_policy() -> None:
    policy = load_policy({"metrics": {"preset": "custom", "queries": {
        "requests": 'sum(increase(http_total{app="$model",version="$version"}[$window]))',
        "errors": 'sum(increase(http_total{app="$model",version="$version",code="500"}[$window]))',
    }}})
    preset = QueryPreset.from_mapping("custom", policy.metrics.queries or {})
    source = PrometheusSource("http://127.0.0.1:9", preset)
    assert source.queries("m", "v3", 60) == {
        "requests": 'sum(increase(http_total{app="m",version="v3"}[1m]))',
        "errors": 'sum(increase(http_total{app="m",version="v3",code="500"}[1m]))',
        "latency": None,
    }


@pytest.mark.parametrize("queries,message", [
    ({"requests": "up"}, "errors"),
    ({"requests": "up{x=\"$nope\"}", "errors": "up"}, r"\$nope"),
])
def test_bad_custom_queries_name_the_problem(queries: dict[str, str], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        load_policy({"metrics": {"preset": "custom", "queries": queries}})


@pytest.mark.parametrize("seconds,text", [(30, "30s"), (60, "1m"), (90, "90s"), (1.5, "1500ms")])
def test_window_rendering(seconds: float, text: str) -> None:
    assert render_window(seconds) == text


def test_policy_errors_name_the_field() -> None:
    with pytest.raises(PolicyError, match=r"promotion\.canary\.steps.*last step must be 100"):
        load_policy({"steps": [10, 50]})
    with pytest.raises(PolicyError, match=r"promotion\.canary\.interval.*bad duration"):
        load_policy({"interval": "soon"})
    assert load_policy({"interval": "1m30s"}).interval == 90
    assert load_policy(None) == CanaryPolicy()


def test_unreachable_prometheus_is_a_fault_not_no_data() -> None:
    """A real refused connection (nothing listens on the port): fault, hold, budget counted."""
    source = PrometheusSource(f"http://127.0.0.1:{free_port()}", "model", timeout=2)
    assert isinstance(source, MetricSource)
    assert not source.is_online()
    obs = source.observe("m", "v1", "v2", 30)
    assert obs.fault is not None and "unreachable" in obs.fault
    now = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    decision = decide(CanaryPolicy(), start_canary("m", "v1", "v2", 10, now), obs, now)
    assert (decision.kind, decision.cause) == ("hold", "fault")
    assert decision.state.fault_intervals == 1


def test_custom_queries_must_be_read_as_counters() -> None:
    """The canary differences the raw counters a query names (exact counts): a rate, a
    ratio or a gauge cannot be read that way and is refused at load, naming the query."""
    with pytest.raises(PolicyError, match=r"promotion\.canary\.metrics.*'requests'.*sum of "
                                          r"increase\(\) of counter selectors"):
        load_policy({"metrics": {"preset": "custom", "queries": {
            "requests": 'sum(rate(http_total{app="$model"}[$window])) * $window',
            "errors": 'sum(increase(http_total{app="$model",code="500"}[$window]))'}}})
    source = PrometheusSource("http://127.0.0.1:9", QueryPreset.from_mapping("custom", {
        "requests": 'sum(increase(a_total{app="$model"}[$window])) + '
                    'sum(increase(b_total{app="$model"}[$window]))',
        "errors": 'sum(increase(a_total{app="$model",code="500"}[$window]))'}))
    assert source.reads("m", "v1", 60) == {"requests": ['a_total{app="m"}', 'b_total{app="m"}'],
                                           "errors": ['a_total{app="m",code="500"}']}
