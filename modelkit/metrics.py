"""The training metrics each rank serves on Prometheus `/metrics` while it trains.

Rank r listens on `MLOPS_METRICS_PORT` + r (0 or unset: no server). Why an
endpoint and not a Pushgateway: it needs no extra service, in a cluster
Prometheus already discovers and scrapes pods, and a Pushgateway would keep a
finished job's last values forever.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from modelkit.errors import TrainError

__all__ = ["PORT_ENV", "Metrics"]

PORT_ENV = "MLOPS_METRICS_PORT"


class Metrics:
    """Gauges and a counter labelled by rank, served on ``/metrics`` (no-op when port is 0)."""

    def __init__(self, port: int, rank: int) -> None:
        self.enabled = bool(port)
        if not self.enabled:
            return
        reg = CollectorRegistry()  # our own: a test may start several in one process

        def gauge(name: str, doc: str) -> Any:
            return Gauge(name, doc, ["rank"], registry=reg).labels(rank=str(rank))

        self.loss = gauge("training_loss", "Training loss of the last logged step")
        self.speed = gauge("training_images_per_second", "Images/s of this rank")
        self.step = gauge("training_step", "Global optimisation step reached (resumes included)")
        self.epoch = gauge("training_epoch", "Current epoch")
        self.steps = Counter("training_steps", "Steps run by this process",
                             ["rank"], registry=reg).labels(rank=str(rank))
        try:
            self.server, self.thread = start_http_server(port + rank, registry=reg)
        except OSError as exc:
            raise TrainError(
                f"cannot serve metrics on port {port + rank}: {exc.strerror}") from None

    @classmethod
    def from_env(cls, rank: int) -> Metrics:
        """The metrics of `rank` on `$MLOPS_METRICS_PORT` + rank."""
        value = os.environ.get(PORT_ENV, "0") or "0"
        try:
            port = int(value)
        except ValueError:
            raise TrainError(f"{PORT_ENV}={value!r} is not a port number") from None
        return cls(port, rank)

    def update(self, step: int, epoch: int, loss: float | None = None,
               speed: float | None = None) -> None:
        """One optimisation step done; `loss` and `speed` only on logged steps."""
        if not self.enabled:
            return
        self.steps.inc()
        self.step.set(step)
        self.epoch.set(epoch)
        if loss is not None:
            self.loss.set(loss)
        if speed is not None:
            self.speed.set(speed)

    def close(self) -> None:
        """Stop the server (idempotent for a disabled one)."""
        if self.enabled:
            self.server.shutdown()
            self.server.server_close()
