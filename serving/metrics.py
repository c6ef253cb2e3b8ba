"""Prometheus metrics of one model server, in a registry of its own.

Requests and latency by `model_name`, `model_version` and `status_code` (what the
canary's `model` preset queries), the fault drill's gauges, and the quality signals of
each encoded-image answer (`quality.py`), summed over worker processes when there are
several. The names, buckets and label bounds, and why: docs/inside-serving.md.
"""

import os
import platform
from collections.abc import Iterable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

from serving.quality import (
    BRIGHTNESS_BUCKETS,
    DETECTION_BUCKETS,
    OTHER,
    PIXEL_BUCKETS,
    SCORE_BUCKETS,
    AnswerSignals,
)

BUCKETS = tuple(round(10 ** (-3 + 3 * i / 19), 6) for i in range(20)) + (2.5, 5.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST
#: Set by the multi-worker supervisor (`server.py`) before any worker starts.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> str | None:
    """The shared metrics directory when this process is one of several workers."""
    return os.environ.get(MULTIPROC_ENV) or None


class ServerMetrics:
    """The metric families of one model server."""

    def __init__(
        self, model_name: str, model_version: str, classes: Iterable[str] = ()
    ) -> None:
        """`classes`: the model's class names, the `class` label's values besides `other`."""
        self.registry = CollectorRegistry(auto_describe=True)
        self.labels = {"model_name": model_name, "model_version": model_version}
        names = ("model_name", "model_version")
        self.requests = Counter(
            "model_requests", "Inference requests by HTTP status code.",
            (*names, "status_code"), registry=self.registry,
        )
        self._requests_by_status: dict[int, Counter] = {}
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
        self.inline = Counter(
            "model_inline_requests", "Inference requests run on the event loop, without the "
            "hand-off to a predictor thread (idle server, short work; `--inline-max-ms`).",
            names, registry=self.registry,
        ).labels(**self.labels)
        self.in_flight = Gauge(
            "model_in_flight_requests", "Inference requests admitted and not yet answered.",
            names, registry=self.registry, multiprocess_mode="livesum",
        ).labels(**self.labels)
        self.buffered = Gauge(
            "model_buffered_body_bytes",
            "Bytes of request bodies held, being read or in flight (`--max-buffered-bytes`).",
            names, registry=self.registry, multiprocess_mode="livesum",
        ).labels(**self.labels)
        self.ready = Gauge(
            "model_ready", "1 when the model is loaded, warmed up and not shutting down.",
            names, registry=self.registry, multiprocess_mode="livemin",
        ).labels(**self.labels)
        self.info = Gauge(
            "model_info", "Constant 1; labels describe the loaded model.",
            (*names, "weights_sha256", "paddle_version", "python_version"),
            registry=self.registry, multiprocess_mode="livemax",
        )

        self.fault_delay = Gauge(
            "model_fault_delay_seconds",
            "Fault drill: delay added to every inference request (infer_cfg.yml fault.delay_ms).",
            names, registry=self.registry, multiprocess_mode="livemax",
        ).labels(**self.labels)
        self.fault_error_ratio = Gauge(
            "model_fault_error_ratio",
            "Fault drill: share of inference requests answered with an injected error.",
            names, registry=self.registry, multiprocess_mode="livemax",
        ).labels(**self.labels)
        self.set_fault(0.0, 0.0)

        self.detections = Histogram(
            "model_detections_per_image",
            "Detections returned per image (after the score threshold), encoded-image requests.",
            names, buckets=DETECTION_BUCKETS, registry=self.registry,
        ).labels(**self.labels)
        self.top_score = Histogram(
            "model_top_score",
            "Highest detection score per image (0 for an image without detections).",
            names, buckets=SCORE_BUCKETS, registry=self.registry,
        ).labels(**self.labels)
        class_detections = Counter(
            "model_class_detections",
            "Detections returned by class: the model's class names, 'other' for the rest.",
            (*names, "class"), registry=self.registry,
        )
        self.class_detections = {
            name: class_detections.labels(**self.labels, **{"class": name})
            for name in (*classes, OTHER)
        }
        class_images = Counter(
            "model_class_images",
            "Images whose answer names the class at least once: the model's class names, "
            "'other' for the rest.",
            (*names, "class"), registry=self.registry,
        )
        self.class_images = {
            name: class_images.labels(**self.labels, **{"class": name})
            for name in (*classes, OTHER)
        }
        self.input_brightness = Histogram(
            "model_input_brightness",
            "Mean pixel value of each decoded input image, 0..1, before normalisation.",
            names, buckets=BRIGHTNESS_BUCKETS, registry=self.registry,
        ).labels(**self.labels)
        self.input_pixels = Histogram(
            "model_input_pixels",
            "Width x height of each decoded input image.",
            names, buckets=PIXEL_BUCKETS, registry=self.registry,
        ).labels(**self.labels)

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
        child = self._requests_by_status.get(status_code)
        if child is None:  # labels() validates and locks: once per status code, not per request
            child = self._requests_by_status[status_code] = self.requests.labels(
                **self.labels, status_code=str(status_code))
        child.inc()

    def observe_answer(self, signals: AnswerSignals) -> None:
        """Record the quality signals of one image's successful answer."""
        self.detections.observe(signals.detections)
        self.top_score.observe(signals.top_score)
        other = self.class_detections[OTHER]
        named = set()
        for name, count in signals.classes:
            self.class_detections.get(name, other).inc(count)  # bounded even if not mapped
            if count > 0:
                named.add(name if name in self.class_images else OTHER)
        for name in named:
            self.class_images[name].inc()
        if signals.image is not None:
            self.input_brightness.observe(signals.image.brightness)
            self.input_pixels.observe(signals.image.pixels)

    def exposition(self) -> bytes:
        """The text exposition format for `/metrics` (all workers' when there are several)."""
        shared = multiprocess_dir()
        if shared is None:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=shared)
        return generate_latest(registry)
