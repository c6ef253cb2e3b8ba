"""Metric presets: the rendered PromQL is pinned, the registry fails loudly.

The strings below are the contract with Prometheus: a change to a preset file
shows up here as a diff to review, not as a silently different canary
verdict. `test_promotion_metrics_replay.py` runs the same queries against a
real Prometheus.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest

from promotion.decision.analysis import decide
from promotion.decision.policy import CanaryPolicy, load_policy
from promotion.decision.state import start_canary
from promotion.errors import PolicyError, PresetError
from promotion.metrics import MetricSource
from promotion.metrics.presets import (
    PRESET_NAMES,
    QueryPreset,
    get_preset,
    promql_string,
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


# Issue 41, finding 4: `metrics.namespace` of a pushed canary policy went into the istio
# preset's `destination_workload_namespace="$namespace"` as it was; a value with a quote
# rewrote the query (a canary failing 40 % of its requests read as 0 errors).
HOSTILE = 'x"} or vector(0) or up{a="\\'
_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"')


def _skeleton(promql: str) -> str:
    """The query with every string literal emptied: its structure, whatever the values."""
    return _LITERAL.sub('""', promql)


def _every_query(source: PrometheusSource, model: str, version: str) -> dict[str, str]:
    out = {k: v for k, v in source.queries(model, version, 30).items() if v}
    out |= {f"quality.{k}": v for k, v in source.quality_queries(model, version, 30).items()}
    out["classes"] = source.classes_query(model, version, 30) or ""
    return out


@pytest.mark.parametrize("preset", sorted(PRESET_NAMES))
def test_a_value_cannot_leave_its_label_matcher(preset: str) -> None:
    plain = _every_query(PrometheusSource("http://127.0.0.1:9", preset, namespace="serving"),
                         "shapes-detector", "v2")
    hostile = _every_query(PrometheusSource("http://127.0.0.1:9", preset, namespace=HOSTILE),
                           HOSTILE, HOSTILE)
    assert {k: _skeleton(v) for k, v in hostile.items()} == \
        {k: _skeleton(v) for k, v in plain.items()}
    if preset == "istio":  # the value is there, escaped, inside its own matcher
        assert 'destination_workload_namespace="x\\"} or vector(0) or up{a=\\"\\\\"' \
            in hostile["errors"]


def test_promql_string_escapes_what_ends_a_string() -> None:
    assert promql_string('a"b\\c\nd\x1b') == 'a\\"b\\\\c\\nd\\x1b'
    assert promql_string("shapes-detector-v2") == "shapes-detector-v2"


@pytest.mark.parametrize("template", [
    "sum(up{namespace=$namespace})",                       # no quotes: nothing to escape in
    "sum(up{namespace='$namespace'})",                     # single quotes escape otherwise
    'sum(up{app="m"}) + $version',
])
def test_a_placeholder_outside_a_double_quoted_value_is_refused(template: str) -> None:
    with pytest.raises(PolicyError, match="must be inside a double-quoted label value"):
        load_policy({"metrics": {"preset": "custom", "queries": {
            "requests": template, "errors": 'sum(up{app="$model"})'}}})


def test_a_namespace_is_a_kubernetes_name() -> None:
    with pytest.raises(PolicyError, match=r"metrics\.namespace.*Kubernetes namespace name"):
        load_policy({"metrics": {"namespace": HOSTILE}})
    assert load_policy({"metrics": {"namespace": "team-a"}}).metrics.namespace == "team-a"
