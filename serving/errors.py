"""Errors of the serving room, each carrying the HTTP status a caller sees.

A request that fails is answered with a real status code and an OIP error
body (`{"error": "..."}`), never "200 with an error field". The class says
what the caller should do next: fix the request (4xx), come back later
(503), or report a server fault (500). `exit_code` lets the CLI print the
message without a traceback when the same error happens at start-up (for
example a model directory that cannot be loaded).
"""

from contracts.errors import ExitCode, MlopsError


class ServingError(MlopsError):
    """Base class: an HTTP status and a message meant for the caller."""

    status_code = 500
    exit_code = ExitCode.BAD_INPUT

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(ServingError):
    """Malformed body, unknown tensor, wrong shape or datatype: fix the request."""

    status_code = 400


class RequestTimeout(ServingError):
    """The body did not arrive within the server's read timeout (a slow or stalled client)."""

    status_code = 408


class ClientClosed(ServingError):
    """The client went away before its body arrived: nginx's 499, a client-side outcome
    that must never count as the server's error in a canary's verdict."""

    status_code = 499


class NotFound(ServingError):
    """Unknown model, version or route."""

    status_code = 404


class PayloadTooLarge(ServingError):
    """The body exceeds the server's configured limit."""

    status_code = 413


class Unavailable(ServingError):
    """Not ready yet, shutting down, or at the in-flight limit: retry later."""

    status_code = 503


class InferenceFailed(ServingError):
    """The predictor raised on a request that passed validation."""

    status_code = 500


class ModelDirError(ServingError):
    """The model directory is missing a file or has an invalid config."""

    status_code = 500
