"""Errors of the workflows room, named after what the caller does next."""


class ConfigError(Exception):
    """A model repo's configuration is wrong: fix the named file and field."""

    exit_code = 2


class StepError(Exception):
    """A pipeline step failed; the message says which and where its log is."""

    exit_code = 1
