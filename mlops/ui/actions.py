"""What each button does: exactly the domain function its CLI command calls.

Approve -> `gitops.approval.approve_as` (`mlops pr approve N --by WHO`); pause, resume,
abort, promote, approve a step -> `promotion.gitrepo.steering.canary_action`
(`mlops canary ACTION MODEL --by WHO`); rollback -> `steering.rollback_to` (`mlops
rollback MODEL`) with the readiness check the CLI would use for the UI's runtime.
A rollback to a version that is not ready answers 202 (:class:`Pending`) once the
version is back at 0 %; a thread of the UI process moves the traffic once it is ready,
its outcome on the model's card and in the log; a second press meanwhile is a 409.
Why: docs/make-before-break.md. A refusal is the project's `MlopsError`, turned into a
4xx whose body is the CLI's one-line message (:func:`http_status`).
"""

from __future__ import annotations

import logging
import pathlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from contracts.errors import ExitCode, MlopsError
from gitops.approval import approve_as
from promotion.cluster.readiness import Readiness, ReadinessCheck
from promotion.errors import RollbackNotReady
from promotion.gitrepo.rollback import DEFAULT_WAIT
from promotion.gitrepo.steering import canary_action, rollback_to

log = logging.getLogger("mlops.ui")

_STATUS = {
    ExitCode.BAD_INPUT: 400, ExitCode.CONFLICT: 409, ExitCode.PUSH_REJECTED: 409,
    ExitCode.DIGEST_MISMATCH: 409, ExitCode.GATE_REFUSED: 409, ExitCode.NOT_FOUND: 404,
    ExitCode.UNAVAILABLE: 503,
}

#: How long the button's request waits for the rollback to reach its wait (the clone,
#: the first commit, the runtime's first answer) before it answers 202 anyway.
ANSWER_WITHIN = 60.0


def http_status(exc: MlopsError) -> int:
    """The HTTP status for a refusal (its exit code says what kind it is; a version that
    does not become ready conflicts with the rollback asked for: 409)."""
    if isinstance(exc, RollbackNotReady):
        return 409
    return _STATUS.get(ExitCode(int(exc.exit_code)), 400) if int(exc.exit_code) in \
        {int(c) for c in ExitCode} else 400


class RollbackBusy(MlopsError):
    """A rollback of the model is already under way in this UI (409)."""

    exit_code = ExitCode.CONFLICT


@dataclass(frozen=True)
class Runtime:
    """Who the rollback asks whether a version is ready: `check` (None: nobody), the
    runtime's name, and why nobody is asked (a note the answer carries)."""

    check: ReadinessCheck | None
    name: str = "none"
    note: str = ""


@dataclass(frozen=True)
class Pending:
    """A rollback that waits, in a thread of the UI process, for its version to be ready
    before it moves the traffic: the request's answer (202)."""

    message: str


@dataclass
class Rollback:
    """One rollback of a model, as its card shows it: `waiting` (the thread waits for the
    version), then `done` or `failed`, with the lines it said."""

    model: str
    by: str
    to: str | None
    started: float
    state: str = "starting"
    lines: list[str] = field(default_factory=list)
    ended: float | None = None
    answered: threading.Event = field(default_factory=threading.Event)
    """Set when the request can answer: the runtime said "not ready yet", or it ended."""
    error: MlopsError | None = None

    def view(self) -> dict[str, Any]:
        return {"state": self.state, "by": self.by, "to": self.to,
                "started": self.started, "ended": self.ended,
                "message": "\n".join(self.lines)}


class _Heard:
    """The runtime's check, telling the request when it may answer: at the first "not
    ready yet" (the rollback waits from there on, in the thread)."""

    def __init__(self, check: ReadinessCheck, job: Rollback) -> None:
        self.inner, self.job = check, job

    def check(self, model: str, version: str, desired: Mapping[str, Any] | None) -> Readiness:
        answer = self.inner.check(model, version, desired)
        if not answer.ready and not answer.lasting:
            self.job.to = self.job.to or version
            self.job.state = "waiting"
            self.job.answered.set()
        return answer

    def routed(self, model: str, weights: Mapping[str, int]) -> Readiness:
        return self.inner.routed(model, weights)


@dataclass
class Actions:
    """The GitOps repo the buttons commit to, and the forge that holds its PRs.

    `runtime` says who tells readiness (built per rollback: a cluster's namespace is read
    from the GitOps repo); None: nobody, as with `--readiness none`."""

    gitops: str
    forge: Callable[[], Any]
    branch: str = "main"
    models_root: pathlib.Path | None = None
    runtime: Callable[[], Runtime] | None = None
    wait: float = DEFAULT_WAIT
    poll: float = 1.0
    answer_within: float = ANSWER_WITHIN
    rollbacks: dict[str, Rollback] = field(default_factory=dict)
    """The newest rollback of each model this process ran (the model's card shows it)."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: dict[str, threading.Thread] = field(default_factory=dict)

    def approve(self, number: int, by: str) -> str:
        return approve_as(self.gitops, number, self.forge(), by, where="`mlops ui`")

    def canary(self, model: str, action: str, by: str) -> str:
        return canary_action(self.gitops, model, action, by, self.branch)

    def rollback(self, model: str, by: str, to: str | None = None) -> str | Pending:
        """Roll back make-before-break: the lines `mlops rollback` prints once the traffic
        moved, or :class:`Pending` while the version is not ready yet (the thread goes on).
        `RollbackBusy` while another rollback of the model waits."""
        runtime = self.runtime() if self.runtime is not None else Runtime(None)
        job = Rollback(model, by, to, time.time())
        with self._lock:
            running = self.rollbacks.get(model)
            if running is not None and running.ended is None:
                raise RollbackBusy(
                    f"{model}: a rollback{' to ' + running.to if running.to else ''} by "
                    f"{running.by} is under way since "
                    f"{time.strftime('%H:%M:%S', time.localtime(running.started))} "
                    f"({running.state}); it moves the traffic once the version is ready, "
                    f"within {self.wait:.0f}s of its start. Wait for it on this page")
            self.rollbacks[model] = job
            thread = threading.Thread(target=self._run, args=(job, runtime),
                                      name=f"mlops-ui-rollback-{model}", daemon=True)
            self._threads[model] = thread
        thread.start()
        job.answered.wait(self.answer_within)
        if job.ended is not None:
            if job.error is not None:
                raise job.error
            return "\n".join(job.lines)
        return Pending("\n".join([*job.lines, self._pending_note(job, runtime)]))

    def _pending_note(self, job: Rollback, runtime: Runtime) -> str:
        return (f"{job.to or 'the version'} takes the traffic once {runtime.name} says it is "
                f"ready (up to {self.wait:.0f}s); until then the version that serves keeps "
                "every request. This model's card shows how it ends")

    def _run(self, job: Rollback, runtime: Runtime) -> None:
        """The rollback, in its thread: the outcome goes to `job` and the process log."""
        def hear(line: str) -> None:
            job.lines.append(line)
            log.info("%s: rollback by %s: %s", job.model, job.by, line.strip())

        check = _Heard(runtime.check, job) if runtime.check is not None else None
        try:
            lines = rollback_to(self.gitops, job.model, job.by, to=job.to, branch=self.branch,
                                models_root=self.models_root, readiness=check,
                                wait=self.wait, progress=hear, poll=self.poll)
            if runtime.check is None and runtime.note:
                lines.append(f"note: {runtime.note}")
            job.lines.extend(lines)
            job.state = "done"
            log.info("%s: rollback by %s done: %s", job.model, job.by, " / ".join(lines))
        except MlopsError as exc:
            job.error = exc
            job.lines.append(str(exc))
            job.state = "failed"
            log.error("%s: rollback by %s failed: %s", job.model, job.by, exc)
        except Exception as exc:  # a bug: the log has the traceback, the card a line
            job.error = MlopsError(f"internal error ({type(exc).__name__}): {exc}")
            job.lines.append(str(job.error))
            job.state = "failed"
            log.exception("%s: rollback by %s failed", job.model, job.by)
        finally:
            job.ended = time.time()
            job.answered.set()

    def join(self, model: str, timeout: float | None = None) -> Rollback | None:
        """Wait for the model's rollback thread to end (tests, shutdown); its record."""
        thread = self._threads.get(model)
        if thread is not None:
            thread.join(timeout)
        return self.rollbacks.get(model)

    def stop(self) -> None:
        """On shutdown: say which rollbacks are left waiting (their first commit is in git;
        pressing Rollback again picks up from there)."""
        for job in list(self.rollbacks.values()):
            if job.ended is None:
                log.warning("%s: rollback by %s left waiting at shutdown (%s): what it "
                            "committed stays; press Rollback again to finish it",
                            job.model, job.by, job.state)
