"""Error base class for the face of the tool (the CLI)."""


class UserError(Exception):
    """A problem the user can fix; the CLI prints it without a traceback."""

    exit_code = 2
