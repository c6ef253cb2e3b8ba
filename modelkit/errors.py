"""The training script's error: one `error: ...` line on stderr and exit code 2, no traceback."""

from __future__ import annotations

import sys
from typing import Callable

from contracts.errors import ExitCode, MlopsError

__all__ = ["TrainError", "run_main"]


class TrainError(MlopsError):
    """Bad input or an unusable directory; printed as one line, exit code 2."""

    exit_code = ExitCode.BAD_INPUT


def run_main(body: Callable[[], object], *errors: type[BaseException]) -> int:
    """Run `body`; a `TrainError` or one of the repo's own `errors` (each with an
    `exit_code`) becomes `error: <message>` on stderr and its exit code, else 0."""
    caught: tuple[type[BaseException], ...] = (TrainError, *errors)
    try:
        body()
    except caught as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return int(getattr(exc, "exit_code", ExitCode.BAD_INPUT))
    return 0
