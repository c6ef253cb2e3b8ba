"""Approve a proposal as a person: what `mlops pr approve N` and the UI's Approve do.

`gitops.approval.approve` checks the evaluated digest on the would-be merge and
merges; here the merge is authored by the person who approved (the local forge
writes them as the merge commit's author; a hosted forge merges as its token's
owner and names them in the title), and the PR gets a comment saying who
approved and from where. The comment is a courtesy: merged is merged, so a
comment that fails is reported in the returned line, not raised.
"""

from __future__ import annotations

import pathlib

from contracts.errors import MlopsError
from gitops.approval import approve
from gitops.forges.base import Forge
from gitops.people import identity_of

__all__ = ["approve_as"]


def approve_as(repo: str | pathlib.Path, number: int, forge: Forge, by: str,
               where: str = "the CLI") -> str:
    """Check, merge as `by`, note it on the PR; the line the CLI prints and the UI shows."""
    result = approve(repo, number, forge, author=identity_of(by))
    message = result.message
    if result.status == "merged":
        try:
            forge.comment(number, f"Approved by {by} in {where}: {message}")
        except MlopsError as exc:
            message += f" (note not added: {exc})"
    return f"{message} (approved by {by})"
