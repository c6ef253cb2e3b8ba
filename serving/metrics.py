"""Prometheus metrics of one model server, in a registry of its own.

Names and labels are what the canary analysis queries (the `model` preset
in `promotion/`): every inference request is counted by
`model_requests_total{model_name, model_version, status_code}` and timed by
`model_request_duration_seconds`; `model_inference_duration_seconds` times
only the predictor, so the two histograms together show where time goes.
A fault drill's delay and injected errors land in the first two (that is
what a drill rehearses), and `model_fault_delay_seconds` /
`model_fault_error_ratio` say that a drill is on (0 when none), so an
operator can tell a rehearsal from a real regression.

Buckets: 20 log-spaced bounds from 1 ms to 1 s (ratio ~1.44, so a quantile
read from them is off by at most ~20 %), plus 2.5 s and 5 s for outliers.
A per-server registry (not the global one) keeps several servers in one
test process apart.
"""

import platform

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

BUCKETS = tuple(round(10 ** (-3 + 3 * i / 19), 6) for i in range(20)) + (2.5, 5.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class ServerMetrics:
    """The metric families of one model server."""

    def __init__(self, model_name: str, model_version: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.labels = {"model_name": model_name, "model_version": model_version}
        names = ("model_name", "model_version")
        self.requests = Counter(
            "model_requests", "Inference requests by HTTP status code.",
            (*names, "status_code"), registry=self.registry,
        )
        self.request_duration = Histogram(
            "model_request_duration_seconds",
            "Time from request arrival to response, inference routes.",
            names, buckets=BUCKETS, registry=self.registry,
        ).labels(**self.labels)
        self.inference_duration = Histogram(
            "model_inference_duration_seconds",
            "Time inside the Paddle predictor's run().",
            names, buckets=BUCKETS, registry=self.registry,
        ).labels(**self.labels)
        self.in_flight = Gauge(
            "model_in_flight_requests", "Inference requests admitted and not yet answered.",
            names, registry=self.registry,
        ).labels(**self.labels)
        self.ready = Gauge(
            "model_ready", "1 when the model is loaded, warmed up and not shutting down.",
            names, registry=self.registry,
        ).labels(**self.labels)
        self.info = Gauge(
            "model_info", "Constant 1; labels describe the loaded model.",
            (*names, "weights_sha256", "paddle_version", "python_version"),
            registry=self.registry,
        )

        self.fault_delay = Gauge(
            "model_fault_delay_seconds",
            "Fault drill: delay added to every inference request (infer_cfg.yml fault.delay_ms).",
            names, registry=self.registry,
        ).labels(**self.labels)
        self.fault_error_ratio = Gauge(
            "model_fault_error_ratio",
            "Fault drill: share of inference requests answered with an injected error.",
            names, registry=self.registry,
        ).labels(**self.labels)
        self.set_fault(0.0, 0.0)

    def set_fault(self, delay_seconds: float, error_ratio: float) -> None:
        """Publish the model's declared fault drill (zeros: none)."""
        self.fault_delay.set(delay_seconds)
        self.fault_error_ratio.set(error_ratio)

    def set_info(self, weights_sha256: str, paddle_version: str) -> None:
        """Publish the loaded model's identity."""
        self.info.labels(
            **self.labels, weights_sha256=weights_sha256, paddle_version=paddle_version,
            python_version=platform.python_version(),
        ).set(1)

    def count(self, status_code: int) -> None:
        """Count one answered inference request."""
        self.requests.labels(**self.labels, status_code=str(status_code)).inc()

    def exposition(self) -> bytes:
        """The text exposition format for `/metrics`."""
        return generate_latest(self.registry)
