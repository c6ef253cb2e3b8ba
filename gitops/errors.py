"""Errors of the GitOps room, named after what the caller should do next.

Each is a :class:`contracts.errors.MlopsError` with its ``exit_code``; messages pass
URLs through :func:`gitops.git.redact`, so they never carry credentials.

* :class:`ConflictError` -- the remote changed the lines we change: a person must look.
* :class:`PushRejectedError` -- the remote kept moving; running again may succeed.
* :class:`BrokenManifestError` -- a file in the GitOps repo does not parse; fix it.
* :class:`DigestMismatchError` -- approval refused: not the evaluated weights digest.
* :class:`MessageError` -- a commit subject or trailer is not one printable line.
* :class:`GitError` -- git itself failed (network, auth, hook); message is git's.
"""

from __future__ import annotations

from contracts.errors import ExitCode, MlopsError


class GitOpsError(MlopsError):
    """Base of every user-facing GitOps error."""

    exit_code = ExitCode.BAD_INPUT


class GitError(GitOpsError):
    """A git command failed for a reason retrying will not fix by itself."""

    exit_code = ExitCode.FAILED


class ConflictError(GitOpsError):
    """Our change and the remote's change touch the same lines: stop, ask a human."""

    exit_code = ExitCode.CONFLICT

    def __init__(self, message: str, files: list[str] | None = None) -> None:
        super().__init__(message)
        self.files = list(files or [])


class PushRejectedError(GitOpsError):
    """The remote kept moving; the bounded retries are exhausted."""

    exit_code = ExitCode.PUSH_REJECTED


class BrokenManifestError(GitOpsError):
    """A file in the GitOps repo cannot be parsed or has the wrong shape."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class DigestMismatchError(GitOpsError):
    """The merged Deployment's weights digest is not the evaluated one."""

    exit_code = ExitCode.DIGEST_MISMATCH


class MessageError(GitOpsError):
    """A commit subject or trailer we were asked to write is not one clean line."""


class ForgeError(GitOpsError):
    """A forge (GitHub, GitLab, Gitea, local) refused or failed a request."""


class UnknownForgeError(ForgeError):
    """A forge name that no backend registered."""


class ForgeSetupError(ForgeError):
    """Not enough to reach the forge (its repo name, its API URL); fix the flags."""

    exit_code = ExitCode.BAD_INPUT


class PullRequestNotFound(ForgeError):
    """No pull request with that number (or for that branch)."""

    exit_code = ExitCode.NOT_FOUND
