"""What each button does: exactly the domain function its CLI command calls.

* Approve -> `gitops.approval.approve_as` (`mlops pr approve N --by WHO`: the
  digest check on the would-be merge, the merge authored by the person who
  approved, a comment on the PR saying who and where);
* pause, resume, abort, promote, approve a step ->
  `promotion.gitrepo.steering.canary_action` (`mlops canary ACTION MODEL --by WHO`);
* rollback -> `promotion.gitrepo.steering.rollback_to` (`mlops rollback MODEL`).

A refusal is the project's `MlopsError`; the route turns it into a 4xx whose body
is the CLI's one-line message (:func:`http_status`).
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Any, Callable

from contracts.errors import ExitCode, MlopsError
from gitops.approval import approve_as
from promotion.gitrepo.steering import canary_action, rollback_to

_STATUS = {
    ExitCode.BAD_INPUT: 400, ExitCode.CONFLICT: 409, ExitCode.PUSH_REJECTED: 409,
    ExitCode.DIGEST_MISMATCH: 409, ExitCode.GATE_REFUSED: 409, ExitCode.NOT_FOUND: 404,
    ExitCode.UNAVAILABLE: 503,
}


def http_status(exc: MlopsError) -> int:
    """The HTTP status for a refusal (its exit code says what kind it is)."""
    return _STATUS.get(ExitCode(int(exc.exit_code)), 400) if int(exc.exit_code) in \
        {int(c) for c in ExitCode} else 400


@dataclass
class Actions:
    """The GitOps repo the buttons commit to, and the forge that holds its PRs."""

    gitops: str
    forge: Callable[[], Any]
    branch: str = "main"
    models_root: pathlib.Path | None = None

    def approve(self, number: int, by: str) -> str:
        return approve_as(self.gitops, number, self.forge(), by, where="`mlops ui`")

    def canary(self, model: str, action: str, by: str) -> str:
        return canary_action(self.gitops, model, action, by, self.branch)

    def rollback(self, model: str, by: str, to: str | None = None) -> str:
        return "\n".join(rollback_to(self.gitops, model, by, to=to, branch=self.branch,
                                     models_root=self.models_root))
