"""The local runtime's error base: the CLI prints it as one line, without a traceback."""

from contracts.errors import ExitCode, MlopsError


class LocalError(MlopsError):
    """A problem with the local runtime the user can fix (a missing binary, a busy port)."""

    exit_code = ExitCode.BAD_INPUT


class PlatformError(LocalError):
    """The platform could not be started or stopped as asked."""
