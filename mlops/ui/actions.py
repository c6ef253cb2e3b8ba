"""What each button does: exactly the function its CLI command calls.

* Approve -> `mlops.commands.pr.approve_pr` (`mlops pr approve N`: the digest
  check on the would-be merge, then the merge), then a comment on the PR saying
  who approved it in the UI;
* pause, resume, abort, promote, approve a step ->
  `mlops.commands.canary.canary_action` (`mlops canary ACTION MODEL --by WHO`);
* rollback -> `mlops.commands.rollback.rollback_to` (`mlops rollback MODEL`).

A refusal is the project's `MlopsError`; the route turns it into a 4xx whose body
is the CLI's one-line message (:func:`http_status`).
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Any, Callable

from contracts.errors import ExitCode, MlopsError

CANARY_ACTIONS = ("pause", "resume", "abort", "promote", "approve")

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
        from mlops.commands.pr import approve_pr

        forge = self.forge()
        message = approve_pr(self.gitops, number, forge)
        try:
            forge.comment(number, f"Approved by {by} in `mlops ui`: {message}")
        except MlopsError as exc:  # merged is merged; the note is a courtesy
            message += f" (note not added: {exc})"
        return f"{message} (approved by {by})"

    def canary(self, model: str, action: str, by: str) -> str:
        from mlops.commands.canary import canary_action

        if action not in CANARY_ACTIONS:
            from mlops.errors import UserError

            raise UserError(f"unknown canary action {action!r}; choose one of "
                            f"{', '.join(CANARY_ACTIONS)}")
        return canary_action(self.gitops, model, action, by, self.branch)  # type: ignore[arg-type]

    def rollback(self, model: str, by: str, to: str | None = None) -> str:
        from mlops.commands.rollback import rollback_to

        return "\n".join(rollback_to(self.gitops, model, by, to=to, branch=self.branch,
                                     models_root=self.models_root))
