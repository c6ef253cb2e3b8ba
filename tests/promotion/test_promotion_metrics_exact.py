"""Exact counts at two scrapes per window, against a real Prometheus.

The cluster's usual setup: a 30 s scrape and the policy's 60 s window. A range of
60 s then holds two samples 30 s apart, and `increase()` stretches their
difference to the whole range (prometheus/prometheus `promql/functions.go`,
`extrapolatedRate`; prometheus#1245, #3746): about twice the requests, which
squares the sequential tests' e-values. `PrometheusSource` differences the raw
counter samples at the window's ends instead (`promotion/metrics/counters.py`).

Series are written as OpenMetrics with the scrapes 7 s off the window ends and
loaded with `promtool` into a real Prometheus (`tests/fixtures/prometheus.py`);
the expected count of a window is computed here from the recorded samples alone
(each scrape's increment belongs to the window whose end first sees it), with a
process restart (a counter reset) inside a window, a series born in the middle of
the rollout and a missed scrape.
"""

from __future__ import annotations

import datetime as dt
import math
import time

import numpy as np
import pytest

from promotion.metrics import counters
from promotion.metrics.prometheus import PrometheusSource
from tests.fixtures.prometheus import OpenMetrics, replay_prometheus

SCRAPE = 30
WINDOW = 60
OFFSET = 7  # scrapes 7 s after the window grid
WINDOWS = 30
T0 = (int(time.time()) // 3600 - 3) * 3600
RESET_AT = 11  # the canary's process restarts before its 11th scrape
BORN_AT = 6  # the canary's 5xx series first appears at its 6th scrape
MISSED = {17}  # stable's 17th scrape failed


def _samples(rng: np.random.Generator, rate: float, reset_at: int | None = None,
             born_at: int = 0) -> list[tuple[float, float]]:
    """(time, cumulative count) per scrape; a reset starts the count again from 0."""
    out, total = [], 0.0
    for k in range(born_at, WINDOWS * WINDOW // SCRAPE + 1):
        total += float(rng.poisson(rate * SCRAPE)) if k > born_at else 0.0
        if k == reset_at:
            total = float(rng.poisson(rate * 5))  # restarted 5 s before this scrape
        out.append((T0 + OFFSET + k * SCRAPE, total))
    return out


def _expected(samples: list[tuple[float, float]], end: float) -> float:
    before = [v for ts, v in samples if ts <= end - WINDOW]
    inside = [v for ts, v in samples if end - WINDOW < ts <= end]
    return counters.increase(before[-1] if before else None, inside)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory):
    rng = np.random.default_rng(7)
    series = {
        ("v1", "200"): [s for k, s in enumerate(_samples(rng, 18.0)) if k not in MISSED],
        ("v1", "500"): [s for k, s in enumerate(_samples(rng, 0.02)) if k not in MISSED],
        ("v2", "200"): _samples(rng, 2.0, reset_at=RESET_AT),
        ("v2", "500"): _samples(rng, 0.2, born_at=BORN_AT),
    }
    om = OpenMetrics()
    for (version, code), points in series.items():
        for ts, value in points:
            labels = {"model_name": "exact", "model_version": version, "status_code": code}
            om.add("model_requests", "counter", "model_requests_total", labels, ts, value)
            # a one-bucket latency histogram: every request under 50 ms
            for le in ("0.05", "+Inf"):
                om.add("model_request_duration_seconds", "histogram",
                       "model_request_duration_seconds_bucket", {**labels, "le": le}, ts, value)
    with replay_prometheus(om.text(), tmp_path_factory.mktemp("exact")) as url:
        yield url, series


def test_two_scrapes_per_window_are_counted_exactly(recorded) -> None:
    url, series = recorded
    source = PrometheusSource(url, "model")
    ends = [T0 + (m + 1) * WINDOW for m in range(WINDOWS)]
    doubled = 0
    for end in ends:
        at = dt.datetime.fromtimestamp(end, dt.timezone.utc)
        obs = source.observe("exact", "v1", "v2", WINDOW, at=at)
        assert obs.fault is None, obs.fault
        want = {v: sum(_expected(series[(v, c)], end) for c in ("200", "500"))
                for v in ("v1", "v2")}
        assert (obs.stable.requests, obs.canary.requests) == (want["v1"], want["v2"]), end
        assert obs.canary.errors == _expected(series[("v2", "500")], end)
        assert obs.canary.latency == {0.05: want["v2"], math.inf: want["v2"]}
        # What the preset's PromQL says for the same window (the old reading): the two
        # samples inside it are 30 s apart, and increase() doubles their difference. The
        # requests between the previous window's last sample and this one's first are
        # counted nowhere, those it saw count twice: the tests saw 2x the evidence.
        # (The 200s alone, away from the rollout's start: increase() does not stretch a
        # counter back past zero.)
        inside = [v for ts, v in series[("v1", "200")] if end - WINDOW < ts <= end]
        if len(inside) == 2 and end > T0 + WINDOW:
            said = source.query('sum(increase(model_requests_total{model_name="exact",'
                                'model_version="v1",status_code="200"}[1m]))', at)
            assert float(said[0]["value"][1]) == pytest.approx(2 * (inside[1] - inside[0]))
            doubled += 1
    assert doubled >= WINDOWS - 3
    # every request is counted once over the rollout: the windows add up to the counter
    total_v1 = sum(source.observe("exact", "v1", "v2", WINDOW,
                                  at=dt.datetime.fromtimestamp(e, dt.timezone.utc))
                   .stable.requests for e in ends)
    assert total_v1 == sum([v for ts, v in series[("v1", c)] if ts <= ends[-1]][-1]
                           for c in ("200", "500"))


def test_many_windows_in_one_query_give_the_same_counts(recorded) -> None:
    url, _ = recorded
    source = PrometheusSource(url, "model")
    wanted = [("exact", "v1", "v2", float(WINDOW),
               dt.datetime.fromtimestamp(T0 + (m + 1) * WINDOW, dt.timezone.utc))
              for m in (RESET_AT // 2 - 1, RESET_AT // 2, 20)]
    assert source.observe_many(wanted) == [source.observe(*w) for w in wanted]


@pytest.mark.parametrize("before, samples, added", [
    (None, [3.0, 5.0], 5.0),        # born in the window: counted from 0
    (10.0, [12.0, 15.0], 5.0),
    (10.0, [12.0, 2.0, 4.0], 6.0),  # restarted after 12: 2 + (4 - 2)
    (10.0, [], 0.0),
])
def test_reset_aware_increase(before, samples, added) -> None:
    assert counters.increase(before, samples) == added
