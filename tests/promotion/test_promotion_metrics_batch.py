"""Many models' windows in one query per signal: the same observations as one model at a time.

Against a real Prometheus (`tests/fixtures/prometheus.py`) loaded with the
replay test's recorded rollouts: `PrometheusSource.observe_many` for several
models whose windows end at different times (the controller aligns windows per
model) must equal `observe` asked per model, sample for sample, in the
presets' six queries instead of twelve per model. PromQL relied on, from
prometheus/prometheus docs/querying/: `label_replace` (functions.md), `or`
(operators.md), the `@` modifier (basics.md), and `POST /api/v1/query` with a
form body (api.md).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterator

import pytest
import requests

from promotion.metrics import batch
from promotion.metrics.presets import PRESET_NAMES, QueryPreset, get_preset
from promotion.metrics.prometheus import PrometheusSource
from tests.fixtures.prometheus import OpenMetrics, replay_prometheus
from tests.promotion.test_promotion_metrics_replay import T0, WINDOW, Window, record

MODELS = {"fleet-a": [Window(10), Window(25, canary_errors=0.1), Window(50)],
          "fleet-b": [Window(10, rate=20.0), Window(10, served=0.0), Window(25)],
          "fleet-c": [Window(50, canary_p99_ms=900.0), Window(50), Window(100)]}
# Window ends a model apart, off the whole second (the `time` and `@` precision).
ENDS = {"fleet-a": T0 + 2 * WINDOW, "fleet-b": T0 + 2 * WINDOW + 7.25,
        "fleet-c": T0 + 3 * WINDOW - 0.125, "fleet-none": T0 + 2 * WINDOW}


class Counting(requests.Session):
    """A session that counts the queries it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.queries = 0

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        self.queries += "/api/v1/query" in url
        return super().request(method, url, *args, **kwargs)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    om = OpenMetrics()
    for shape in ("model", "haproxy", "istio"):
        for model, windows in MODELS.items():
            record(om, shape, model, windows)
    with replay_prometheus(om.text(), tmp_path_factory.mktemp("batch")) as url:
        yield url


def wanted(window: float = WINDOW) -> list[tuple[str, str, str, float, dt.datetime]]:
    return [(m, "v1", "v2", window, dt.datetime.fromtimestamp(t, dt.timezone.utc))
            for m, t in ENDS.items()]


@pytest.mark.parametrize("preset", sorted(PRESET_NAMES))
def test_one_query_per_signal_gives_the_per_model_observations(prometheus: str,
                                                               preset: str) -> None:
    one = PrometheusSource(prometheus, preset, namespace="serving")
    alone = [one.observe(*w) for w in wanted()]
    assert all(o.fault is None for o in alone)
    assert all(o.total_requests > 0 for o in alone[:3])  # real counts, not zeros
    assert alone[3].total_requests == 0  # a model without series: no data, also batched
    session = Counting()
    many = PrometheusSource(prometheus, preset, namespace="serving", session=session)
    assert many.observe_many(wanted()) == alone
    assert session.queries == 6  # requests, errors, latency, 2 quality signals, classes


def test_a_query_that_cannot_be_pinned_is_asked_per_window_end(prometheus: str) -> None:
    # `sum(x)` without a range reads the query's `time`: legs are grouped by window end.
    custom = QueryPreset.from_mapping("custom", {
        "requests": 'sum(model_requests_total{model_name="$model",model_version="$version"})',
        "errors": 'sum(increase(model_requests_total{model_name="$model",'
                  'model_version="$version",status_code=~"5.."}[$window]))'})
    one = PrometheusSource(prometheus, custom)
    alone = [one.observe(*w) for w in wanted()]
    assert alone[0].total_requests > 0
    session = Counting()
    many = PrometheusSource(prometheus, custom, session=session)
    assert many.observe_many(wanted()) == alone
    assert session.queries == 1 + 3  # errors pinned in one; requests per distinct end


def test_a_failed_batch_leaves_the_models_to_be_asked_one_by_one(prometheus: str) -> None:
    broken = QueryPreset.from_mapping("custom", {"requests": "sum(rate(x[$window]", "errors": "0"})
    assert PrometheusSource(prometheus, broken).observe_many(wanted()) == [None] * len(ENDS)


@pytest.mark.parametrize("preset", sorted(PRESET_NAMES))
def test_every_preset_query_can_be_pinned(preset: str) -> None:
    source = PrometheusSource("http://unused", preset)
    for promql in source._signals("m", "v1", 60.0).values():
        assert batch.pinnable(promql, "1m"), promql
        assert batch.pin(promql, "1m", 1.5).count("[1m] @ 1.500") == promql.count("[1m]")
    assert get_preset(preset).weight is None or not batch.pinnable(
        get_preset(preset).render("weight", model="m", version="v1", workload="w",
                                  namespace="n", window="1m") or "", "1m")


@pytest.mark.parametrize("promql", [
    'sum(x{a="b"})',                                    # an instant selector
    'sum(increase(x{a="b"}[5m]))',                      # another range
    'sum(increase(x{a="b"}[1m] offset 1m))',            # already shifted
    'sum(increase(x{a="b"}[1m])) / sum(up)',            # a bare name
    'max_over_time(sum(increase(x[1m]))[5m:1m])',       # a subquery
])
def test_queries_that_cannot_be_pinned(promql: str) -> None:
    assert not batch.pinnable(promql, "1m")


def test_split_refuses_an_untagged_sample() -> None:
    with pytest.raises(ValueError, match="mlops_leg"):
        batch.split([{"metric": {"le": "1"}, "value": [0, "1"]}], 1)
