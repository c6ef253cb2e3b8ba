"""What a client may send before the model sees anything: the limits on request heads
and on the bodies the server holds, their defaults and bounds, and their flags.

    mlops serve ... [--max-header-bytes 32768] [--max-headers 100] [--header-timeout 10]
                    [--max-buffered-bytes N]

* **Request head** (`serving.http_guard`): the request line and headers of one request
  may take at most `max_header_bytes` bytes and `max_headers` header fields (431
  otherwise), and must arrive within `header_timeout` seconds of their first byte, or
  of the connection's opening (408 otherwise); the connection is closed either way.
  uvicorn's httptools protocol had no limit: 39 MiB of headers grew the server by
  345 MB and were answered 200. The defaults are those of common front ends (Apache
  and gunicorn take 100 fields; nginx 4 x 8 KiB, Envoy 60 KiB of headers), far above
  what an inference client sends.
* **Bodies held** (`serving.endpoints`): request bodies being read or in flight may
  take at most `max_buffered_bytes` bytes of the process's memory together (default:
  `--max-in-flight` x `--max-body-bytes`). A request whose declared length does not
  fit, or whose body passes it while arriving, is answered 503 (a retry later may
  fit); bodies are charged as they arrive, so a slow sender holds no more than it
  sent. Bodies used to be read without any bound before the in-flight check: 100
  clients x 7 MB with `--max-in-flight 2` grew the server by 617 MB.

These are the platform's settings, for the client -> server boundary: flags of
`mlops serve` (the Deployment passes them), never read from a model's
`infer_cfg.yml` (`serving.options`), which the person who pushes the model writes.
This module imports nothing heavy, so `mlops --help` can register the flags.
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

