"""Live measures and charts (issue 32 items 1 and 3; issue 28's one home for live rates).

`promotion.metrics.live` builds every live query from the preset files: the rendered
PromQL is pinned here, then run for real -- HAProxy-shaped series of a 10 % -> 25 %
canary are backfilled into a real Prometheus (`promtool tsdb create-blocks-from
openmetrics`, `tests/fixtures/prometheus.py`) and read back through instant and range
queries (Prometheus' HTTP API, `/api/v1/query_range`: `start`, `end`, `step`, a
`matrix` of `[time, "value"]`; prometheus/prometheus docs/querying/api.md). The
chart helpers are pure and tested without I/O; the event stream is read from the
app under uvicorn on loopback.
"""

from __future__ import annotations

import json
import math
import time

import pytest
import requests

from mlops.ui import live as charts
from mlops.ui.app import UiConfig
from promotion.decision.policy import load_policy
from promotion.errors import MetricFault
from promotion.metrics.live import LiveReader, live_queries
from promotion.metrics.presets import get_preset
from tests.fixtures.common import free_port
from tests.fixtures.prometheus import OpenMetrics
from tests.fixtures.ui import Served

T0 = (int(time.time()) // 3600 - 3) * 3600  # inside retention, clear of the empty head
BUCKETS = (0.05, 0.25, 1.0, math.inf)


def test_live_queries_are_the_presets_own_templates():
    q = live_queries(get_preset("haproxy"), "det", "v2", 20.0)
    responses = 'haproxy_server_http_responses_total{proxy="det",server="v2"}[20s]'
    assert q["rps"].startswith("((sum(increase(" + responses) and q["rps"].endswith(") / 20")
    assert q["error_share"].count("increase(") == 5  # three error terms over two request terms
    assert q["p99_ms"] == ("histogram_quantile(0.99, sum by (le) (increase("
                           'mlops_router_response_seconds_bucket{proxy="det",server="v2"}[20s]'
                           "))) * 1000")
    assert q["weight"] == 'sum(haproxy_server_weight{proxy="det",server="v2"})'
    assert q["quality.top_score"].startswith("histogram_quantile(0.5, sum by (le)")
    assert "weight" not in live_queries(get_preset("istio"), "det", "v2", 20.0)


def _canary_series() -> str:
    """v1 and v2 behind HAProxy for 120 s, 20 req/s: v2 at 10 % then 25 % from T0+60,
    5 % of its answers 5xx, all of them between 50 and 250 ms (v1: under 50 ms)."""
    om = OpenMetrics()
    counts = {"v1": [0.0, 0.0], "v2": [0.0, 0.0]}
    for tick in range(0, 125, 5):
        ts = T0 + tick
        share = 0.10 if tick < 60 else 0.25
        for version, part, errors, slow in (("v1", 1 - share, 0.0, False),
                                            ("v2", share, 0.05, True)):
            counts[version][0] += 20 * 5 * part * (tick > 0)
            counts[version][1] += 20 * 5 * part * errors * (tick > 0)
            total, bad = counts[version]
            labels = {"proxy": "det", "server": version}
            for code, n in (("2xx", total - bad), ("5xx", bad)):
                om.add("haproxy_server_http_responses", "counter",
                       "haproxy_server_http_responses_total", {**labels, "code": code}, ts, n)
            om.add("haproxy_server_connection_errors", "counter",
                   "haproxy_server_connection_errors_total", labels, ts, 0)
            for le in BUCKETS:
                below = total if (le >= 0.25 or not slow) else 0.0
                om.add("mlops_router_response_seconds", "histogram",
                       "mlops_router_response_seconds_bucket",
                       {**labels, "le": "+Inf" if math.isinf(le) else str(le)}, ts, below)
            om.add("haproxy_server_weight", "gauge", "haproxy_server_weight", labels, ts,
                   round(100 * part))
    return om.text()


def test_range_and_instant_reads_follow_the_canary_in_a_real_prometheus(prometheus_replay):
    url = prometheus_replay(_canary_series())
    reader = LiveReader(url, "haproxy")
    series = reader.series("det", ["v1", "v2"], T0 + 30, T0 + 120, 10, 20)
    assert series.times[0] == T0 + 30 and series.times[-1] == T0 + 120
    v2 = series.values["v2"]
    at = {t: i for i, t in enumerate(series.times)}
    assert v2["weight"][at[T0 + 50]] == 10 and v2["weight"][at[T0 + 110]] == 25
    assert series.values["v1"]["weight"][at[T0 + 110]] == 75
    assert v2["rps"][at[T0 + 50]] == pytest.approx(2.0, rel=0.2)
    assert v2["rps"][at[T0 + 110]] == pytest.approx(5.0, rel=0.2)
    assert v2["error_share"][at[T0 + 110]] == pytest.approx(0.05, rel=0.1)
    assert series.values["v1"]["error_share"][at[T0 + 110]] == 0.0
    assert 50 < v2["p99_ms"][at[T0 + 110]] <= 250
    assert series.values["v1"]["p99_ms"][at[T0 + 110]] <= 50
    now = reader.now("det", ["v2"], window=20, at=T0 + 110)
    assert now["v2"]["weight"] == 25 and now["v2"]["rps"] == pytest.approx(v2["rps"][-2])
    # before any request: the preset counts zero requests (its `or vector(0)`), and a
    # share of no requests is no data (PromQL's 0/0 is NaN), never a zero error share
    early = reader.series("det", ["v2"], T0 - 60, T0 - 30, 10, 20)
    assert set(early.values["v2"]["rps"]) == {0.0}
    assert set(early.values["v2"]["error_share"]) == {None}


def test_a_dead_prometheus_is_a_fault_the_page_shows():
    with pytest.raises(MetricFault, match="unreachable"):
        LiveReader(f"http://127.0.0.1:{free_port()}", "haproxy").series(
            "det", ["v1"], 0, 10, 5, 10)


def test_git_weights_are_a_step_function_of_the_commits():
    history = [("a", 100.0, {"v1": 100}), ("b", 130.0, {"v1": 90, "v2": 10}),
               ("c", 160.0, {"v1": 75, "v2": 25})]
    out = charts.git_weights(history, [90, 100, 129, 130, 170], ["v1", "v2"])
    assert out == {"v1": [None, 100, 100, 90, 75], "v2": [None, 0, 0, 10, 25]}
    timeline = [{"commit": "b", "decision": "step", "subject": "10%", "step": "0->10"}]
    assert charts.marks(history, timeline, start=110.0) == [
        {"at": 130.0, "commit": "b", "decision": "step", "subject": "10%", "step": "0->10"},
        {"at": 160.0, "commit": "c", "decision": "edit", "subject": "", "step": ""}]


def test_the_span_covers_the_rollout_on_a_fixed_grid():
    start, end, step, window = charts.span(started_at=1000.0, now=1600.0, minutes=15)
    # a minute before it started, 240 points at most, the start on the step's grid
    assert (start, end, step, window) == (939, 1600.0, 3, 10.0)
    start, _, step, _ = charts.span(started_at=None, now=10_000.0, minutes=10)
    assert (start, step) == (9_399, 3)
    assert charts.span(None, 100_000.0, 360)[2] == 90.0  # 6 h in 240 points


def test_panels_draw_the_policys_limits():
    policy = load_policy({"max_error_rate": 0.02, "max_p99_ms": 300})
    out = charts.panels(None, {"v1": [100]}, policy, ["v1"])
    limits = {p["id"]: p["threshold"] for p in out}
    assert limits == {"weight": None, "rps": None, "error_share": 0.02, "p99_ms": 300.0}
    assert out[0]["lines"] == [{"version": "v1", "label": "v1 git", "source": "git",
                                "values": [100]}]


def _events(url: str, page: str, count: int, timeout: float = 30) -> list[tuple[str, dict]]:
    found: list[tuple[str, dict]] = []
    with requests.get(f"{url}api/events", params={"page": page}, stream=True,
                      timeout=timeout) as res:
        assert res.headers["content-type"].startswith("text/event-stream")
        kind = ""
        for line in res.iter_lines(decode_unicode=True):
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                found.append((kind, json.loads(line[6:])))
                if len(found) >= count:
                    break
    return found


def test_events_push_the_page_and_the_charts(ui_repo):
    with Served(UiConfig(gitops=str(ui_repo.gitops), user="ada")) as app:
        first = _events(app.url, "models", 2)
        assert [k for k, _ in first] == ["page", "charts"]
        assert first[0][1]["models"][0]["name"] == "det"
        chart = first[1][1]
        assert chart["model"] == "det" and chart["error"].startswith("no Prometheus")
        weight = next(p for p in chart["panels"] if p["id"] == "weight")
        assert weight["lines"][0]["label"] == "v1 git" and weight["lines"][0]["values"][-1] == 100
        res = requests.get(f"{app.url}api/events", params={"page": "nope"}, timeout=10)
        assert res.status_code == 400 and "choose one of models" in res.json()["error"]
        res = requests.get(f"{app.url}api/models/nope/charts", timeout=10)
        assert res.status_code == 404 and "no model 'nope'" in res.json()["error"]
        res = requests.get(f"{app.url}api/models/det/charts", params={"minutes": "x"},
                           timeout=10)
        assert res.status_code == 400 and "minutes='x'" in res.json()["error"]
