"""Error base class for the face of the tool (the CLI)."""

from contracts.errors import ExitCode, MlopsError


class UserError(MlopsError):
    """A problem the user can fix; the CLI prints it without a traceback."""

    exit_code = ExitCode.BAD_INPUT
