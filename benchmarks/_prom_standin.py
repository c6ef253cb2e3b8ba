"""A Prometheus query-API stand-in for the fleet benchmark: synthetic per-version series.

    python benchmarks/_prom_standin.py --port 0 --world world.json --weights weights.json

Why not a real Prometheus: the fleet benchmark runs the controller on a
*simulated* clock (hours of 60 s windows in a few minutes of wall time) and
asks about window ends that are not "now"; a real Prometheus can only answer
about samples it scraped in wall time, and 100 models x 2 versions of real
servers and traffic cannot run on 2 cores. Backfilling a real Prometheus
(`promtool tsdb create-blocks-from openmetrics`) was considered and rejected:
the canary's share of traffic depends on the weights the controller commits
during the run, a feedback loop a block written beforehand cannot follow.

So this process answers `GET /api/v1/query?query=...&time=...` as Prometheus
does (`{"status": "success", "data": {"resultType": "vector", ...}}`), for
the query shapes the presets in promotion/metrics/presets/ render:
`sum(increase(sel[w]))`, `sum by (l, ...) (increase(sel[w]))` and sums of
`(sum(increase(sel[w])) or vector(0))` terms, with `=`, `!=`, `=~`, `!~`
matchers; and the controller's batched form (promotion/metrics/batch.py):
`label_replace(<query>, "mlops_leg", "<i>", "", "") or ...`, each range
pinned with `@ <unix time>`, sent as `GET` or as a `POST` form; and the metric
source's raw reads, `last_over_time(sel[r] @ t)` (a counter at t, as if it had
always counted at today's rate) and `resets(sel[r] @ t)` (none). As Prometheus
does (prometheus/prometheus docs/querying/: functions.md for `label_replace`
with an empty source label and regex, which adds the label; operators.md for
`or`, the union that keeps a right-hand sample only when no left-hand one has
its label set; basics.md for `@`; api.md for the POST form), except that the
synthetic series are stationary, so `@` and `time` change nothing.

The series are synthetic and exact: each model gets `rate` requests per
second, split between its versions by the weights the router applied
(`--weights`, a JSON file the benchmark rewrites as the sync would), so
`increase()` over a window is rate x share x window. A version listed as
failing in `--world` answers 5xx at its error rate; latency, detections,
scores and classes are the same distribution for every version. Every query is
counted (`GET /stats`) so the benchmark can report queries per tick.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import re
import sys
import threading
import urllib.parse
from typing import Any

SELECTOR = re.compile(
    r"increase\(\s*([A-Za-z_:][\w:]*)?\{([^}]*)\}\[(\w+)\](?:\s*@\s*[\d.]+)?\s*\)")
LABEL_REPLACE = re.compile(
    r'^label_replace\((.*),\s*"(\w+)",\s*"([^"]*)",\s*"",\s*""\)$', re.DOTALL)
MATCHER = re.compile(r'\s*([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')
SUM_BY = re.compile(r"^\s*sum\s+by\s*\(([^)]*)\)\s*\(")
RAW = re.compile(r"^\s*(last_over_time|resets)\(\s*([A-Za-z_:][\w:]*)?\{([^}]*)\}\[(\w+)\]"
                 r"\s*@\s*([\d.]+)\s*\)\s*$")
LATENCY_S = {0.005: 0.02, 0.01: 0.1, 0.025: 0.45, 0.05: 0.8, 0.1: 0.95, 0.25: 0.99,
             0.5: 0.998, 1.0: 1.0}
DETECTIONS = {0.5: 0.05, 1.0: 0.2, 2.0: 0.6, 5.0: 0.95, 10.0: 1.0}
TOP_SCORE = {0.25: 0.05, 0.5: 0.15, 0.75: 0.5, 0.9: 0.85, 1.0: 1.0}
CLASSES = {"circle": 0.4, "square": 0.35, "triangle": 0.25}
ERROR_CODES = ("5xx", "500")


def _seconds(text: str) -> float:
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    match = re.fullmatch(r"(\d+)(ms|s|m|h)", text)
    if not match:
        raise ValueError(f"unsupported range {text!r}")
    return int(match.group(1)) * units[match.group(2)]


def _top_level_or(query: str) -> list[str]:
    """`query` split at each `or` outside parentheses and strings."""
    terms, depth, start, quoted, i = [], 0, 0, False, 0
    while i < len(query):
        char = query[i]
        if quoted:
            quoted = char != '"' or query[i - 1] == "\\"
        elif char == '"':
            quoted = True
        elif char in "({[":
            depth += 1
        elif char in ")}]":
            depth -= 1
        elif depth == 0 and query.startswith(" or ", i):
            terms.append(query[start:i].strip())
            start = i = i + 4
            continue
        i += 1
    return [*terms, query[start:].strip()]


def _matches(labels: dict[str, str], matchers: list[tuple[str, str, str]]) -> bool:
    for name, op, value in matchers:
        have = labels.get(name, "")
        hit = re.fullmatch(value, have) is not None if op in ("=~", "!~") else have == value
        if (op in ("=", "=~")) != hit:
            return False
    return True


class World:
    """Synthetic series: per model a request rate, per version a share and an error rate."""

    def __init__(self, world_path: str, weights_path: str, namespace: str) -> None:
        self.paths = {"world": world_path, "weights": weights_path}
        self.namespace = namespace
        self._docs: dict[str, tuple[int, Any]] = {}

    def _read(self, which: str) -> Any:
        """The JSON file, re-read when the benchmark replaced it (by its mtime)."""
        path = self.paths[which]
        try:
            mtime = os.stat(path).st_mtime_ns
        except FileNotFoundError:
            return {}
        cached = self._docs.get(which)
        if cached is None or cached[0] != mtime:
            with open(path) as fh:
                cached = (mtime, json.load(fh))
            self._docs[which] = cached
        return cached[1]

    def weights(self) -> dict[str, dict[str, int]]:
        return dict(self._read("weights"))

    @property
    def rate(self) -> float:
        return float(self._read("world").get("rate", 20.0))

    @property
    def failing(self) -> dict[str, float]:
        """"model/version" -> its 5xx rate."""
        return dict(self._read("world").get("failing", {}))

    def series(self, name: str | None) -> list[tuple[dict[str, str], float]]:
        """(labels, per-second rate) of every series of metric `name` (None: all names).

        Indexed by metric name and rebuilt only when a file changed: like
        Prometheus' own index, a query's cost must not grow with every other
        model's series, or the benchmark would measure the stand-in."""
        self._read("world"), self._read("weights")  # re-read changed files first
        key = tuple(self._docs.get(w, (0, None))[0] for w in ("world", "weights"))
        if getattr(self, "_key", None) != key:
            index: dict[str, list[tuple[dict[str, str], float]]] = {}
            rate, failing = self.rate, self.failing
            for model, split in self.weights().items():
                for version, weight in split.items():
                    rps = rate * weight / 100.0
                    err = failing.get(f"{model}/{version}", 0.0)
                    for metric, lab, value in self._version(model, version, rps, err):
                        index.setdefault(metric, []).append((dict(lab, __name__=metric), value))
            self._index, self._key = index, key
        if name is None:
            return [row for rows in self._index.values() for row in rows]
        return self._index.get(name, [])

    def _version(self, model: str, version: str, rps: float,
                 err: float) -> list[tuple[str, dict[str, str], float]]:
        ok, bad = rps * (1 - err), rps * err
        mv = {"model_name": model, "model_version": version}
        hp = {"proxy": model, "server": version}
        ist = {"reporter": "destination", "destination_workload_namespace": self.namespace,
               "destination_workload": f"{model}-{version}"}
        rows: list[tuple[str, dict[str, str], float]] = [
            ("model_requests_total", {**mv, "status_code": "200"}, ok),
            ("model_requests_total", {**mv, "status_code": "500"}, bad),
            ("haproxy_server_http_responses_total", {**hp, "code": "2xx"}, ok),
            ("haproxy_server_http_responses_total", {**hp, "code": "5xx"}, bad),
            ("haproxy_server_connection_errors_total", hp, 0.0),
            ("haproxy_server_response_errors_total", hp, 0.0),
            ("istio_requests_total", {**ist, "response_code": "200"}, ok),
            ("istio_requests_total", {**ist, "response_code": "500"}, bad),
        ]
        for le, share in [*LATENCY_S.items(), (float("inf"), 1.0)]:
            text = "+Inf" if le == float("inf") else f"{le:g}"
            rows.append(("model_request_duration_seconds_bucket", {**mv, "le": text}, rps * share))
            rows.append(("mlops_router_response_seconds_bucket", {**hp, "le": text}, rps * share))
            ms = "+Inf" if le == float("inf") else f"{le * 1000:g}"
            rows.append(("istio_request_duration_milliseconds_bucket", {**ist, "le": ms},
                         rps * share))
        for metric, buckets in (("model_detections_per_image_bucket", DETECTIONS),
                                ("model_top_score_bucket", TOP_SCORE)):
            for le, share in [*buckets.items(), (float("inf"), 1.0)]:
                text = "+Inf" if le == float("inf") else f"{le:g}"
                rows.append((metric, {**mv, "le": text}, ok * share))
        for cls, share in CLASSES.items():
            rows.append(("model_class_detections_total", {**mv, "class": cls}, ok * 2 * share))
            rows.append(("model_class_images_total", {**mv, "class": cls},
                         ok * min(1.0, 1.5 * share)))
        return rows

    def raw(self, function: str, name: str | None, matchers: str,
            at: float) -> list[tuple[dict[str, str], float]]:
        """`last_over_time(name{matchers}[r] @ t)`: each series' counter at t, as if it had
        counted at today's rate since the epoch (stationary: two ends asked together give
        rate x share x window, the increase() of the window); `resets(...)`: none."""
        parsed = [(m.group(1), m.group(2), m.group(3)) for m in MATCHER.finditer(matchers)]
        return [({k: v for k, v in labels.items() if k != "__name__"},
                 rps * at if function == "last_over_time" else 0.0)
                for labels, rps in self.series(name) if _matches(labels, parsed)]

    def select(self, name: str | None, matchers: str,
               window: str) -> list[tuple[dict[str, str], float]]:
        """`increase(name{matchers}[window])`: labels without the name, count in the window."""
        parsed = [(m.group(1), m.group(2), m.group(3)) for m in MATCHER.finditer(matchers)]
        seconds = _seconds(window)
        out = []
        for labels, rps in self.series(name):
            if _matches(labels, parsed):
                out.append(({k: v for k, v in labels.items() if k != "__name__"}, rps * seconds))
        return out

    def evaluate(self, query: str) -> list[tuple[dict[str, str], float]]:
        """The preset query shapes (see the module docstring); ValueError for anything else."""
        terms = _top_level_or(query)
        if len(terms) > 1 or LABEL_REPLACE.match(terms[0]):
            rows: list[tuple[dict[str, str], float]] = []
            seen: set[tuple[tuple[str, str], ...]] = set()
            for term in terms:
                leg = LABEL_REPLACE.match(term)
                if leg is None:
                    raise ValueError(f"only label_replace(...) legs are joined with `or`: {term}")
                for labels, value in self.evaluate(leg.group(1)):
                    labels = {**labels, leg.group(2): leg.group(3)}
                    key = tuple(sorted(labels.items()))
                    if key not in seen:  # `or`: a label set already on the left wins
                        seen.add(key)
                        rows.append((labels, value))
            return rows
        raw = RAW.match(query)
        if raw is not None:
            function, name, matchers, _, at = raw.groups()
            return self.raw(function, name or None, matchers, float(at))
        selectors = SELECTOR.findall(query)
        if not selectors:
            raise ValueError("no increase(selector[range]) in the query")
        by = SUM_BY.match(query)
        if "or vector(0)" in query or (by is None and query.lstrip().startswith("(")):
            total = sum(v for sel in selectors for _, v in self.select(*sel))
            return [({}, total)]
        if len(selectors) != 1:
            raise ValueError("more than one selector outside an `or vector(0)` sum")
        rows = self.select(*selectors[0])
        if by is None:
            return [({}, sum(v for _, v in rows))] if rows else []
        keys = [k.strip() for k in by.group(1).split(",") if k.strip()]
        groups: dict[tuple[str, ...], float] = {}
        for labels, value in rows:
            key = tuple(labels.get(k, "") for k in keys)
            groups[key] = groups.get(key, 0.0) + value
        return [(dict(zip(keys, key)), value) for key, value in sorted(groups.items())]


class Handler(http.server.BaseHTTPRequestHandler):
    """`/api/v1/query`, `/-/ready` and `/stats` (queries answered so far)."""

    protocol_version = "HTTP/1.1"
    world: World
    counter = {"queries": 0}
    lock = threading.Lock()

    def log_message(self, *args: Any) -> None:  # quiet: the benchmark prints its own lines
        pass

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        """`/api/v1/query` with its parameters as a form in the body (a long query)."""
        length = int(self.headers.get("Content-Length") or 0)
        self._query(urllib.parse.urlsplit(self.path).path,
                    urllib.parse.parse_qs(self.rfile.read(length).decode()))

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/-/ready":
            self._send(200, {"status": "ready"})
            return
        if url.path == "/stats":
            self._send(200, dict(self.counter))
            return
        self._query(url.path, urllib.parse.parse_qs(url.query))

    def _query(self, path: str, params: dict[str, list[str]]) -> None:
        if path != "/api/v1/query":
            self._send(404, {"status": "error", "error": f"no route {path}"})
            return
        query = (params.get("query") or [""])[0]
        at = float((params.get("time") or ["0"])[0])
        with self.lock:
            self.counter["queries"] += 1
        try:
            rows = self.world.evaluate(query)
        except ValueError as exc:
            self._send(400, {"status": "error", "errorType": "bad_data", "error": str(exc)})
            return
        result = [{"metric": labels, "value": [at, f"{value:.6f}"]} for labels, value in rows]
        self._send(200, {"status": "success", "data": {"resultType": "vector", "result": result}})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--world", required=True)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--namespace", default="default")
    args = parser.parse_args()
    Handler.world = World(args.world, args.weights, args.namespace)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(server.server_address[1], flush=True)  # the benchmark reads the port
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
