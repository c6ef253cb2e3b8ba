"""The sync's repo half: follow the GitOps repo's branch and keep the last good desired state.

Argo CD's repo server and its refresh, on one machine: each poll asks git for
the branch's tip; when it moved, ``apps/`` at that commit is parsed
(:mod:`desired`). A model whose files are broken keeps its last good spec and
the error, naming the file, is kept for the status file. In cluster-latency
mode (``sync_delay``) a commit counts only once it has been on the branch
that long, as Argo CD notices a commit at its next poll.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import tempfile
import time
from typing import Any

from local.platform.desired import ModelProblem, ModelSpec, merge_last_good, read_checkout
from local.platform.gitsource import GitSource, GitSourceError
from local.platform.workdir import PlatformConfig, Workdir

log = logging.getLogger("mlops.sync")


class RepoSync:
    """The desired state read from git, and what the status file says about it."""

    def __init__(self, workdir: Workdir, config: PlatformConfig) -> None:
        self.config = config
        self.source = GitSource(config.gitops, config.branch, workdir.gitops_cache)
        self.desired: dict[str, ModelSpec] = {}
        self.errors: list[ModelProblem] = []
        self.git_error: str | None = None
        self.seen_commit: str | None = None
        #: model -> git tree id of its folder at `seen_commit` (what was parsed).
        self.folders: dict[str, str] = {}
        self.applied_commit: str | None = None
        self.applied_at: float | None = None
        #: Commits seen on main and when (cluster-latency mode, ``sync_delay``).
        self.heads: list[tuple[str, float]] = []

    def _due_head(self, head: str | None, now: float) -> str | None:
        """The newest commit that has been visible for `sync_delay` seconds (cluster mode).

        Argo CD notices a commit at its next poll (every 3 minutes by default),
        so in cluster-latency mode a commit is applied only once it has been
        on main that long; commits that came after it wait their own turn.
        """
        if head is not None and (not self.heads or self.heads[-1][0] != head):
            self.heads.append((head, now))
        due = [sha for sha, seen in self.heads if now - seen >= self.config.sync_delay]
        if not due:
            return None
        newest = due[-1]
        self.heads = [(sha, seen) for sha, seen in self.heads
                      if sha == newest or now - seen < self.config.sync_delay]
        return newest

    def poll(self) -> None:
        """Read the branch's tip if it moved; a broken model keeps its last good spec."""
        try:
            head = self.source.head()
            if self.config.sync_delay > 0:
                head = self._due_head(head, time.monotonic())
            if head is None or head == self.seen_commit:
                self.git_error = None
                return
            # Only the model folders whose git tree moved are exported and parsed:
            # with a fleet in one repo, a commit is one model's decision (issue 31).
            folders = self.source.folders(head)
            changed = tuple(m for m, tree in folders.items() if self.folders.get(m) != tree)
            specs: dict[str, ModelSpec] = {}
            errors: list[ModelProblem] = []
            if changed:
                with tempfile.TemporaryDirectory(prefix="mlops-sync-") as tree:
                    self.source.export(head, pathlib.Path(tree),
                                       tuple(f"apps/{m}" for m in changed))
                    specs, errors = read_checkout(pathlib.Path(tree))
        except GitSourceError as exc:
            if str(exc) != self.git_error:
                log.error("cannot read the GitOps repo: %s", exc)
            self.git_error = str(exc)
            return
        self.git_error = None
        kept = {m: s for m, s in self.desired.items() if m in folders and m not in changed}
        self.desired = {**kept, **merge_last_good(self.desired, specs, errors)}
        errors = [e for e in self.errors if e.model in folders and e.model not in changed] + errors
        self.folders = folders
        self.errors = errors
        self.seen_commit = head
        for error in errors:
            log.error(
                "commit %s: %s -- keeping the last good state of model %s",
                head[:12], error.message, error.model,
            )
        if not errors:
            self.applied_commit = head
            self.applied_at = time.time()
        log.info(
            "commit %s read: %s",
            head[:12],
            ", ".join(f"{m}={dict(s.weights)}" for m, s in sorted(self.desired.items())
                      if m in changed)
            or "no model changed",
        )

    def status(self) -> dict[str, Any]:
        """The repo's part of the status file."""
        return {
            "gitops": self.config.gitops,
            "branch": self.config.branch,
            "seen_commit": self.seen_commit,
            # main's tip as the sync last fetched it: ahead of `applied` while a sync
            # delay holds it back, or while it is refused (errors)
            "tip_commit": self.heads[-1][0] if self.heads else self.seen_commit,
            "sync_delay": self.config.sync_delay,
            "start_delay": self.config.start_delay,
            "applied_commit": self.applied_commit,
            "applied_at": self.applied_at,
            "errors": [dataclasses.asdict(e) for e in self.errors],
            "git_error": self.git_error,
        }
