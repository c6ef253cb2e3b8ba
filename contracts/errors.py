"""One error contract for every room: a base class and the exit-code table.

Every error meant for a person derives from :class:`MlopsError` and carries an
:class:`ExitCode` saying what went wrong in a way a script can branch on
(retry later, ask a human, fix the input). The CLI prints ``error: <message>``
on stderr and exits with that code; nothing meant for a person is a traceback.
The CLI reference's exit-code table is generated from this enum and its `#:` comments
(`mlops/reference/cli.py`; tests/test_docs_site.py holds them equal).
"""

from __future__ import annotations

import enum
import sys
from typing import TextIO

from cogs.text import printable

__all__ = ["ExitCode", "MlopsError", "report"]


class ExitCode(enum.IntEnum):
    """What an `mlops` command's exit status means."""

    FAILED = 1  #: a run, step or command failed; the message (and its log) says why
    BAD_INPUT = 2  #: a file, field, flag or request is wrong; fix the one named
    CONFLICT = 3  #: someone else's change is in the way (same lines, a running canary)
    PUSH_REJECTED = 4  #: the remote kept moving or refused the push; run again later
    DIGEST_MISMATCH = 5  #: weights other than the evaluated ones; nothing was approved
    GATE_REFUSED = 6  #: the candidate did not pass the gate (outputs are still written)
    NOT_FOUND = 7  #: the pull request, model or version named does not exist
    UNAVAILABLE = 8  #: a service we need did not answer (Argo Server, forge, Prometheus)
    CANNOT_SERVE = 9  #: the model server cannot answer (its warm-up failed): no restart helps


class MlopsError(Exception):
    """Base of every error meant for a person rather than a traceback."""

    exit_code: int = ExitCode.FAILED


def report(exc: BaseException, stream: TextIO | None = None) -> int | None:
    """Print a person-meant error as one `error: ...` line on stderr and return its exit
    code; None for anything else (a bug: let it raise, with its traceback)."""
    if not isinstance(exc, MlopsError):
        return None
    # A message may quote what a pusher wrote (a field of mlops.yaml, a dataset's name):
    # its controls are shown escaped, never sent to the terminal (`cogs.text`).
    print(f"error: {printable(str(exc))}", file=stream or sys.stderr, flush=True)
    return int(exc.exit_code)
