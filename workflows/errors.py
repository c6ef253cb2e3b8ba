"""Errors of the workflows room, named after what the caller does next."""

from contracts.errors import ExitCode, MlopsError


class ConfigError(MlopsError):
    """A model repo's configuration is wrong: fix the named file and field."""

    exit_code = ExitCode.BAD_INPUT


class StepError(MlopsError):
    """A pipeline step failed; the message says which and where its log is."""

    exit_code = ExitCode.FAILED
