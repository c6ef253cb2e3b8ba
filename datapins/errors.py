"""Errors of the datapins room, named after what the caller does next.

Every message names the file and the entry (image id, annotation id, path) so a bad
dataset is fixed at the named place, not found by reading a traceback.
"""

from contracts.errors import ExitCode, MlopsError


class DataError(MlopsError):
    """The dataset (or the lock file) is wrong: fix the named file and entry."""

    exit_code = ExitCode.BAD_INPUT


class DataDigestMismatch(MlopsError):
    """A fetched file's bytes are not the pinned ones: the source changed under the pin."""

    exit_code = ExitCode.DIGEST_MISMATCH


class DataNotFound(MlopsError):
    """A pinned file is no longer in the source."""

    exit_code = ExitCode.NOT_FOUND


class SourceUnavailable(MlopsError):
    """The source (an S3 endpoint) did not answer; run again later."""

    exit_code = ExitCode.UNAVAILABLE
