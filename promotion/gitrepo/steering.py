"""A person steers a rollout: what `mlops canary ACTION`, `mlops rollback` and the UI's
buttons call, so the command line and the web page make the same commits.

* :func:`canary_action` -- pause, resume, abort, promote or approve a step: one
  commit to `promotion.yaml` (`promotion.gitrepo.apply.human_commit`);
* :func:`rollback_to` -- an earlier version stable at 100 %, without analysis
  (`promotion.gitrepo.rollback.rollback`): one commit, or two when a runtime to ask
  says the version is not ready yet (make-before-break).

Each returns the lines a person reads (the CLI prints them, the UI shows them). An
unknown action is a `SteeringError` that lists the choices.
"""

from __future__ import annotations

import datetime as dt
import pathlib
from typing import Callable, cast, get_args

from gitops.writeback import Backoff, WriteBack
from promotion.cluster.readiness import ReadinessCheck
from promotion.errors import SteeringError
from promotion.gitrepo.apply import HumanAction, human_commit
from promotion.gitrepo.rollback import DEFAULT_WAIT, rollback

__all__ = ["CANARY_ACTIONS", "canary_action", "rollback_to"]

CANARY_ACTIONS: tuple[str, ...] = get_args(HumanAction)

_DONE = {"pause": "paused", "resume": "resumed", "abort": "abort requested",
         "promote": "promotion requested", "approve": "next step approved"}


def canary_action(gitops: str, model: str, action: str, by: str, branch: str = "main",
                  workdir: pathlib.Path | None = None) -> str:
    """Commit one human action; the line `mlops canary ACTION` prints."""
    if action not in CANARY_ACTIONS:
        raise SteeringError(f"unknown canary action {action!r}; choose one of "
                            f"{', '.join(CANARY_ACTIONS)}")
    writer = WriteBack(gitops, workdir=workdir, backoff=Backoff(tries=5, first=0.5))
    now = dt.datetime.now(dt.timezone.utc)
    result, state = human_commit(writer, branch, model, cast(HumanAction, action), by, now)
    commit = (result.commit or "")[:12]
    return (f"{model}: {_DONE[action]} at {state.weight}% ({state.phase.value}); commit {commit}"
            if result.status == "committed" else f"{model}: nothing to change")


def rollback_to(gitops: str, model: str, by: str, to: str | None = None, branch: str = "main",
                workdir: pathlib.Path | None = None,
                models_root: pathlib.Path | None = None,
                readiness: ReadinessCheck | None = None, wait: float = DEFAULT_WAIT,
                progress: Callable[[str], None] | None = None, poll: float = 1.0) -> list[str]:
    """Commit the rollback; the lines `mlops rollback` prints.

    With `readiness`, a version that is not ready is brought up first and gets the
    traffic once it is (two commits; `progress` hears the first and the wait)."""
    command = f"mlops rollback {model}" + (f" --to {to}" if to else "")
    result = rollback(
        gitops, model, to=to, by=by, branch=branch, workdir=workdir, models_root=models_root,
        backoff=Backoff(tries=5, first=0.5), command=command, readiness=readiness, wait=wait,
        poll=poll, progress=progress,
    )
    if result.status != "committed":
        return [result.message]
    lines = [f"{result.message}; commit {(result.commit or '')[:12]}"]
    if result.ready:
        lines.append(f"  ready before it took the traffic: {result.ready}")
    if result.checked:
        lines.append(f"  model files: {result.checked}")
    return lines
