"""The controller's own `/metrics`: what it decided, and on what numbers.

Every analysed value is exported next to its threshold (design §5: every decision
is explainable), so a dashboard can draw "canary error rate vs limit" without
parsing commit trailers. Gauges are per model (and per check); a model whose
rollout ends keeps its last values until the next rollout overwrites them.

A private `CollectorRegistry` per controller keeps tests (and two controllers
in one process) from colliding in the global registry.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

__all__ = ["ControllerMetrics", "PHASES"]

PHASES = ("idle", "progressing", "paused", "promoted", "rolled_back")
_VERDICTS = {"pass": 1.0, "unknown": 0.0, "skipped": 0.0, "fail": -1.0}


class ControllerMetrics:
    """Gauges and counters of one controller; `serve(port)` exposes them."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.weight = Gauge("mlops_canary_weight_percent",
                            "Canary traffic weight in percent, as committed", ["model"], registry=r)
        self.phase = Gauge("mlops_canary_phase",
                           "1 for the model's current rollout phase, 0 for the others",
                           ["model", "phase"], registry=r)
        self.last_decision = Gauge(
            "mlops_canary_last_decision_timestamp_seconds",
            "End of the window of the latest decision, by kind and cause",
            ["model", "kind", "cause"], registry=r)
        self.decisions = Counter("mlops_canary_decisions_total",
                                 "Decisions made, committed or not", ["model", "kind", "cause"],
                                 registry=r)
        self.commits = Counter("mlops_canary_commits_total",
                               "Decision commits pushed to the GitOps repo", ["model", "kind"],
                               registry=r)
        self.errors = Counter("mlops_controller_errors_total",
                              "Failures while reconciling a model (git, config, forge)",
                              ["model", "error"], registry=r)
        self.check_value = Gauge("mlops_canary_check_value",
                                 "An analysed value (same unit as its threshold)",
                                 ["model", "check"], registry=r)
        self.check_threshold = Gauge("mlops_canary_check_threshold",
                                     "The threshold the analysed value is compared with",
                                     ["model", "check"], registry=r)
        self.check_verdict = Gauge("mlops_canary_check_verdict",
                                   "1 pass, 0 unknown/skipped, -1 fail", ["model", "check"],
                                   registry=r)
        self.check_statistic = Gauge("mlops_canary_check_statistic",
                                     "Test statistic of a check (log e-value for the "
                                     "sequential tests)", ["model", "check"], registry=r)
        self.window_requests = Gauge("mlops_canary_window_requests",
                                     "Requests in the latest analysis window",
                                     ["model", "version"], registry=r)
        self.last_tick = Gauge("mlops_controller_last_tick_timestamp_seconds",
                               "When the controller last finished a reconcile pass", registry=r)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def state(self, model: str, phase: str, weight: int) -> None:
        """Record a model's committed phase and weight."""
        self.weight.labels(model).set(weight)
        for name in PHASES:
            self.phase.labels(model, name).set(1.0 if name == phase else 0.0)

    def decision(self, model: str, kind: str, cause: str, at: float,
                 evidence: Mapping[str, Any] | None = None) -> None:
        """Record one decision and its checks."""
        self.decisions.labels(model, kind, cause).inc()
        self.last_decision.labels(model, kind, cause).set(at)
        evidence = evidence or {}
        window = evidence.get("window") or {}
        for version in ("stable", "canary"):
            requests = (window.get(version) or {}).get("requests")
            if isinstance(requests, (int, float)):
                self.window_requests.labels(model, version).set(requests)
        for check in evidence.get("checks", []) or []:
            name = str(check.get("name"))
            for gauge, key in ((self.check_value, "value"), (self.check_threshold, "threshold"),
                               (self.check_statistic, "statistic")):
                value = check.get(key)
                if isinstance(value, (int, float)):
                    gauge.labels(model, name).set(value)
            self.check_verdict.labels(model, name).set(_VERDICTS.get(check.get("verdict"), 0.0))

    def committed(self, model: str, kind: str) -> None:
        """Count a pushed decision commit."""
        self.commits.labels(model, kind).inc()

    def error(self, model: str, error: str) -> None:
        """Count a failure while reconciling `model`."""
        self.errors.labels(model, error).inc()

    def tick(self) -> None:
        """Mark the end of a reconcile pass."""
        self.last_tick.set(time.time())

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Serve `/metrics` on `addr:port` in a daemon thread; returns the bound port."""
        self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        return int(self._server.server_port)

    def close(self) -> None:
        """Stop the HTTP server, if one was started."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
