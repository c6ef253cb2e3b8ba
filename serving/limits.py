"""What a client may send before the model sees anything: the limits on request heads
and on the bodies the server holds, their defaults and bounds, and their flags.

    mlops serve ... [--max-header-bytes 32768] [--max-headers 100] [--header-timeout 10]
                    [--max-buffered-bytes N]

Heads are held by `serving.http_guard` (431, 408), bodies by `serving.endpoints` (503).
They are the platform's flags, never read from a model's `infer_cfg.yml`. This module
imports nothing heavy, so `mlops --help` can register the flags. Why these defaults:
docs/inside-serving.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import math

MAX_HEADER_BYTES = 32 * 1024
MAX_HEADERS = 100
HEADER_TIMEOUT = 10.0

#: (least, most) each limit may be set to; `HttpLimits` refuses anything outside.
BOUNDS: dict[str, tuple[float, float]] = {
    "max_header_bytes": (1024, 1024 * 1024),
    "max_headers": (8, 1000),
    "header_timeout": (0.1, 300.0),
    "max_buffered_bytes": (1024, 1 << 40),
}


@dataclasses.dataclass(frozen=True)
class HttpLimits:
    """The request-head limits and the memory bodies may hold (see the module docstring)."""

    max_header_bytes: int = MAX_HEADER_BYTES
    max_headers: int = MAX_HEADERS
    header_timeout: float = HEADER_TIMEOUT
    #: None: `--max-in-flight` x `--max-body-bytes` (`body_budget`).
    max_buffered_bytes: int | None = None

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            low, high = BOUNDS[field.name]
            if not (isinstance(value, (int, float)) and math.isfinite(value)
                    and low <= value <= high):
                raise ValueError(f"--{field.name.replace('_', '-')} must be between "
                                 f"{low:g} and {high:g}, not {value!r}")

    def body_budget(self, max_in_flight: int, max_body_bytes: int) -> int:
        """The bytes of bodies the process may hold; ValueError when one body of the
        largest size allowed could never fit."""
        if self.max_buffered_bytes is None:
            return max_in_flight * max_body_bytes
        if self.max_buffered_bytes < max_body_bytes:
            raise ValueError(f"--max-buffered-bytes ({self.max_buffered_bytes}) must be at "
                             f"least --max-body-bytes ({max_body_bytes}): a body of the "
                             "largest size allowed must fit")
        return self.max_buffered_bytes


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The `mlops serve` flags of `HttpLimits`; left out, None (`serving.settings` has the
    defaults and bounds)."""
    parser.add_argument("--max-header-bytes", type=int, metavar="N",
                        help="bytes a request line and its headers may take; more get 431 "
                             f"and the connection closed (default {MAX_HEADER_BYTES})")
    parser.add_argument("--max-headers", type=int, metavar="N",
                        help=f"header fields a request may have; more get 431 (default "
                             f"{MAX_HEADERS})")
    parser.add_argument("--header-timeout", type=float, metavar="S",
                        help="seconds a request's headers may take to arrive, from their "
                             "first byte or the connection's opening; then 408 and the "
                             f"connection closed (default {HEADER_TIMEOUT:g})")
    parser.add_argument("--max-buffered-bytes", type=int, metavar="N",
                        help="bytes of request bodies held at once, being read or in "
                             "flight; a body that does not fit gets 503 (default: "
                             "--max-in-flight x --max-body-bytes)")

