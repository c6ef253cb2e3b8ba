"""The server's settings: every option of `mlops serve`, with its default and bounds, and
the rule that merges them with the model's own `serving:` section of `infer_cfg.yml`.

`mlops serve` parses its flags (an option left out is None) and hands them here
(`ServeSettings.from_options`); a bad value is refused before the model is loaded,
naming the flag. The precedence, for the options a model may declare
(`serving.options.ServingOptions`): flag > `infer_cfg.yml` > default. The bounds of
those options are the same whether a flag or the model gives them (`serving.options`
holds them); the request-head limits' bounds are `serving.limits.BOUNDS`.
`mlops serve` reads no environment variable: the Deployment passes every value as a flag.
Light on purpose (no numpy): `mlops serve` checks its flags, and sets the OpenMP threads,
before the model's libraries load.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any, Literal, Mapping

import pydantic

from cogs.options import explain, shown
from contracts.errors import ExitCode, MlopsError
from serving import limits
from serving.options import (
    BatchMaxSize,
    BatchTimeoutMs,
    MaxRequestPixels,
    ServingOptions,
    Workers,
)

if TYPE_CHECKING:
    from serving.dataplane import ServerSettings

__all__ = ["DEFAULTS", "ServeSettings", "SettingsError"]


def _limit(name: str) -> Any:
    low, high = limits.BOUNDS[name]
    return pydantic.Field(ge=low, le=high)


class SettingsError(MlopsError):
    """An option the server cannot run with; the message names the flag."""

    exit_code = ExitCode.BAD_INPUT


class ServeSettings(pydantic.BaseModel):
    """How one `mlops serve` runs: its flags, checked, merged with the model's section."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    port: int = pydantic.Field(ge=0, le=65535)
    host: str = "127.0.0.1"
    model_name: str | None = None
    """None: model.yaml's name, else the directory's."""
    model_version: str | None = None
    """None: model.yaml's version, else `sha256-<12 hex digits of the weights>`."""
    weights_sha256: str | None = None
    max_body_bytes: int = pydantic.Field(default=8 * 1024 * 1024, ge=1)
    max_in_flight: int = pydantic.Field(default=16, ge=1)
    body_timeout: float = pydantic.Field(default=10.0, gt=0)
    threads: int | None = pydantic.Field(default=None, ge=1)
    """Predictor threads per worker process (None: the cores divided among the workers)."""
    math_threads: int = pydantic.Field(default=1, ge=1)
    graceful_timeout: float = pydantic.Field(default=30.0, ge=0)
    workers: Workers = 1
    batch_max_size: BatchMaxSize = 1
    """1: batching off."""
    batch_timeout_ms: BatchTimeoutMs = 0.0
    """0: a batch is what queued while the predictor ran."""
    inline_max_ms: float = pydantic.Field(default=20.0, ge=0, le=1000)
    max_request_pixels: MaxRequestPixels = 16 * 1024 * 1024
    """A 12 MP photo fits (`serving.preprocess.MAX_REQUEST_PIXELS`, for its direct callers)."""
    reduced_decode: bool = False
    decode_timeout: float = pydantic.Field(default=5.0, gt=0, le=3600)
    max_header_bytes: Annotated[int, _limit("max_header_bytes")] = limits.MAX_HEADER_BYTES
    max_headers: Annotated[int, _limit("max_headers")] = limits.MAX_HEADERS
    header_timeout: Annotated[float, _limit("header_timeout")] = limits.HEADER_TIMEOUT
    max_buffered_bytes: Annotated[int, _limit("max_buffered_bytes")] | None = None
    """None: `max_in_flight` x `max_body_bytes`."""
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    termination_log: str | None = None
    """None: a version whose warm-up fails stays live and never ready (the local platform
    reads why from its readiness probe). A path (the Deployment's terminationMessagePath):
    the server writes why there and exits `ExitCode.CANNOT_SERVE`, for the kubelet to show."""

    @pydantic.model_validator(mode="after")
    def _one_body_fits(self) -> ServeSettings:
        if self.max_buffered_bytes is not None and self.max_buffered_bytes < self.max_body_bytes:
            raise ValueError(f"--max-buffered-bytes ({self.max_buffered_bytes}) must be at "
                             f"least --max-body-bytes ({self.max_body_bytes}): a body of the "
                             "largest size allowed must fit")
        return self

    @classmethod
    def from_options(cls, options: Mapping[str, Any],
                     declared: ServingOptions | None = None) -> ServeSettings:
        """The settings from parsed flags (None: not given): a flag given wins, else the
        model's `serving:` section (`declared`), else the default. A bad value is a
        `SettingsError` naming the flag."""
        given = {k: v for k, v in options.items() if v is not None and k in cls.model_fields}
        if declared is not None:
            for field, value in declared.model_dump(exclude_none=True).items():
                given.setdefault(field, value)
        nan = [k for k, v in given.items() if isinstance(v, float) and math.isnan(v)]
        if nan:  # pydantic's own words for nan ("finite number") name no bound
            bounds = {k: cls.bounds(k) for k in nan}
            raise SettingsError("; ".join(
                f"--{k.replace('_', '-')} nan: must be a number{bounds[k]}" for k in nan))
        try:
            return cls(**given)
        except pydantic.ValidationError as exc:
            raise SettingsError(explain(exc)) from None

    @classmethod
    def bounds(cls, field: str) -> str:
        """A field's bounds in words (`' between 0 and 1000'`), '' when it has none."""
        low = high = None
        for rule in cls.model_fields[field].metadata:
            low = getattr(rule, "ge", None) if low is None else low
            low = getattr(rule, "gt", None) if low is None else low
            high = getattr(rule, "le", None) if high is None else high
        if low is not None and high is not None:
            return f" between {shown(low)} and {shown(high)}"
        return f" of at least {shown(low)}" if low is not None else ""

    def http_limits(self) -> limits.HttpLimits:
        """The request-head limits and the memory bodies may hold."""
        return limits.HttpLimits(self.max_header_bytes, self.max_headers, self.header_timeout,
                                 self.max_buffered_bytes)

    def threads_per_worker(self, cores: int) -> int:
        """`threads`, else `cores` divided among the worker processes (at least 1)."""
        return self.threads if self.threads is not None else max(1, cores // self.workers)

    def server_settings(self, model_name: str, model_version: str,
                        cores: int) -> ServerSettings:
        """What one server process runs with, for the model it serves."""
        # Imported here: the data plane loads numpy, which must come after the caller
        # has set OMP_NUM_THREADS from these settings (`mlops serve`).
        from serving.dataplane import ServerSettings
        from serving.preprocess import ImageOptions

        return ServerSettings(
            model_name=model_name, model_version=model_version, host=self.host,
            port=self.port, max_body_bytes=self.max_body_bytes,
            max_in_flight=self.max_in_flight, threads=self.threads_per_worker(cores),
            math_threads=self.math_threads, graceful_timeout=self.graceful_timeout,
            body_timeout=self.body_timeout, weights_sha256=self.weights_sha256,
            workers=self.workers, batch_max_size=self.batch_max_size,
            batch_timeout_ms=self.batch_timeout_ms, inline_max_ms=self.inline_max_ms,
            images=ImageOptions(self.max_request_pixels, self.decode_timeout,
                                self.reduced_decode),
            limits=self.http_limits(), termination_log=self.termination_log)


#: Every option's default (the port aside: it has none), for what is built without flags.
DEFAULTS = ServeSettings.model_construct(port=0)
