"""The Forge interface: pull requests as approvals, whatever hosts the repo.

One module per backend (``local``, ``github``, ``gitlab``, ``gitea``) implements
:class:`Forge`; :mod:`gitops.forges.registry` picks one by name and fails loudly
on an unknown name. Callers (proposal, approval, the CLI) see only this file.

States are normalised to three: ``open``, ``merged``, ``closed`` (closed
without merging). ``head_sha`` is the PR branch's tip as the forge sees it;
``merge(number, head_sha=...)`` refuses when the branch moved since the caller
verified it (GitHub ``sha``, GitLab ``sha``, Gitea ``head_commit_id``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from gitops.git import Identity

PRState = Literal["open", "merged", "closed"]


@dataclass(frozen=True)
class PullRequest:
    """A pull (merge) request, as any forge describes it."""

    number: int
    title: str
    body: str
    branch: str
    base: str
    state: PRState
    url: str = ""
    head_sha: str | None = None
    merge_commit: str | None = None


def pick_relevant(prs: list[PullRequest]) -> PullRequest | None:
    """Of one branch's PRs: the open one if any, else the newest one."""
    if not prs:
        return None
    open_prs = [p for p in prs if p.state == "open"]
    return max(open_prs or prs, key=lambda p: p.number)


@runtime_checkable
class Forge(Protocol):
    """What the pipeline needs from a forge. All methods are idempotent-safe to retry."""

    name: str

    def open_pr(self, branch: str, base: str, title: str, body: str) -> PullRequest:
        """Open a PR from ``branch`` into ``base``; an existing open PR is returned instead."""
        ...

    def find_pr(self, branch: str) -> PullRequest | None:
        """The open PR for ``branch``, else its most recent PR, else None."""
        ...

    def get_pr(self, number: int) -> PullRequest:
        """One PR by number; PullRequestNotFound if there is none."""
        ...

    def list_prs(self, state: PRState | None = "open") -> list[PullRequest]:
        """PRs in ``state`` (None: all), newest first."""
        ...

    def update_pr(
        self, number: int, *, title: str | None = None, body: str | None = None
    ) -> PullRequest:
        """Replace the title and/or body (a re-proposal refreshes its report)."""
        ...

    def comment(self, number: int, body: str) -> None:
        """Add a comment (e.g. the rollback report)."""
        ...

    def merge(
        self, number: int, *, head_sha: str | None = None, message: str | None = None,
        author: Identity | None = None,
    ) -> PullRequest:
        """Merge with a merge commit; refuse if the head is not ``head_sha``.

        ``author``: who approved. The local forge authors the merge commit as them; a
        hosted forge merges as its token's owner (its merge API takes no author) and
        names them in the merge commit's title instead.
        """
        ...
