"""Many models' windows in one query: the same observations as one model at a time.

Against a real Prometheus (`tests/fixtures/prometheus.py`) loaded with the
replay test's recorded rollouts: `PrometheusSource.observe_many` for several
models whose windows end at different times (the controller aligns windows per
model) must equal `observe` asked per model, sample for sample, in one query
for all of them (each counter's raw values at its window's ends, pinned with `@`)
where one model alone also takes one. PromQL relied on, from
prometheus/prometheus docs/querying/: `label_replace` (functions.md), `or`
(operators.md), the `@` modifier (basics.md), and `POST /api/v1/query` with a
form body (api.md).
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any, Iterator

import pytest
import requests

from promotion.errors import PresetError
from promotion.metrics import batch
from promotion.metrics.presets import PRESET_NAMES, QueryPreset, counter_selectors, get_preset
from promotion.metrics.prometheus import MAX_LEGS, PrometheusSource
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
def test_one_query_gives_the_per_model_observations(prometheus: str, preset: str) -> None:
    one = PrometheusSource(prometheus, preset, namespace="serving")
    alone = [one.observe(*w) for w in wanted()]
    assert all(o.fault is None for o in alone)
    assert all(o.total_requests > 0 for o in alone[:3])  # real counts, not zeros
    assert alone[3].total_requests == 0  # a model without series: no data, also batched
    session = Counting()
    many = PrometheusSource(prometheus, preset, namespace="serving", session=session)
    assert many.observe_many(wanted()) == alone
    assert session.queries == 1


def test_a_failed_batch_leaves_the_models_to_be_asked_one_by_one(prometheus: str) -> None:
    broken = QueryPreset.from_mapping("custom", {
        "requests": 'sum(increase(x{a=~"("}[$window]))', "errors": "sum(increase(x[$window]))"})
    assert PrometheusSource(prometheus, broken).observe_many(wanted()) == [None] * len(ENDS)


def test_a_big_pass_is_split_into_queries_of_max_legs(prometheus: str) -> None:
    session = Counting()
    source = PrometheusSource(prometheus, "haproxy", namespace="serving", session=session)
    # haproxy: 9 counter selectors a version, 3 legs each: 54 a model
    assert source.observe_many(wanted() * 2) == [source.observe(*w) for w in wanted() * 2]
    assert session.queries == math.ceil(54 * 8 / MAX_LEGS) + 8


@pytest.mark.parametrize("preset", sorted(PRESET_NAMES))
def test_every_preset_query_is_read_as_its_counters(preset: str) -> None:
    source = PrometheusSource("http://unused", preset)
    reads = source.reads("m", "v1", 60.0)
    assert set(reads) == {"requests", "errors", "latency", "quality.detections_per_image",
                          "quality.top_score", "classes"}
    assert all(sel and "increase" not in sel for sels in reads.values() for sel in sels)
    assert get_preset(preset).weight is None or counter_selectors(
        get_preset(preset).render("weight", model="m", version="v1", workload="w",
                                  namespace="n", window="1m") or "", "1m") is None


@pytest.mark.parametrize("promql", [
    'sum(x{a="b"})',                                    # an instant selector
    'sum(increase(x{a="b"}[5m]))',                      # another range
    'sum(rate(x{a="b"}[1m]))',                          # a rate
    'sum(increase(x{a="b"}[1m])) / sum(up)',            # a ratio
    'max_over_time(sum(increase(x[1m]))[5m:1m])',       # a subquery
])
def test_queries_that_are_not_sums_of_increases(promql: str) -> None:
    assert counter_selectors(promql, "1m") is None
    with pytest.raises(PresetError, match="counts exactly from the raw counters"):
        QueryPreset.from_mapping("custom", {"requests": promql.replace("[1m]", "[$window]"),
                                            "errors": "sum(increase(x[$window]))"})


def test_split_refuses_an_untagged_sample() -> None:
    with pytest.raises(ValueError, match="mlops_leg"):
        batch.split([{"metric": {"le": "1"}, "value": [0, "1"]}], 1)
