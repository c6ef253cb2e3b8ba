"""Several decisions, one push: a batch of commits written by one writer.

`WriteBack.commit` is one change, one commit, one push. A controller that
steers a fleet decides for many models in one pass; pushing each decision on
its own costs a fetch, a checkout and a push per model, one after the other,
and the last model's decision waits for all of them (issue 31: at 100 models
and 20 canaries that is most of a pass). `commit_batch` keeps *one decision,
one commit* -- each change is its own commit with its own message and
trailers -- and pushes them together:

* each change runs in the work clone on top of the previous ones; a change
  that raises (e.g. `promotion.errors.StaleDecision`: its model moved on the
  branch) is reset and reported as that item's error, the others go on;
  a change that stages nothing is `unchanged`;
* one push, never forced. Rejected because the remote moved: fetch, reset
  to the new tip and **run the changes again** there (not a rebase: each
  change re-checks the state it was decided from, so a decision whose model
  a human changed meanwhile drops out as stale instead of being merged
  line by line), then push again, with `WriteBack`'s bounded back-off.

The clone, its lock and the back-off are `WriteBack`'s (same work clone, so
single commits and batches of one writer never race each other).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Callable, Literal, Sequence

from gitops.errors import GitError, PushRejectedError
from gitops.git import Git, redact
from gitops.writeback import _REJECTED, Message, WriteBack

__all__ = ["BatchItem", "BatchResult", "commit_batch"]


@dataclasses.dataclass(frozen=True)
class BatchItem:
    """One change and the message of its commit."""

    change: Callable[[pathlib.Path], object]
    message: Message


@dataclasses.dataclass(frozen=True)
class BatchResult:
    """What became of one item: committed (its sha), unchanged, or its change's error."""

    status: Literal["committed", "unchanged", "error"]
    commit: str | None = None
    error: Exception | None = None
    attempts: int = 1


def _apply(writer: WriteBack, git: Git, tip: str,
           items: Sequence[BatchItem]) -> list[BatchResult]:
    """Run every change on `tip`, one commit each, and give each commit its sha."""
    git.run("checkout", "-q", "-f", "-B", "batch", tip)
    git.run("clean", "-q", "-ffdx")
    out: list[BatchResult] = []
    for item in items:
        # The change AND its commit are the item's: a message git refuses (a control
        # character in a trailer) is that item's error like a change that raises; it
        # once escaped this loop and lost every other model's decision of the pass
        # (issue 41, finding 9).
        try:
            out.append(_commit_one(writer, git, item))
        except Exception as exc:  # this item's fault only: undo its edits, go on
            git.run("reset", "-q", "--hard", "HEAD")
            git.run("clean", "-q", "-ffdx")
            out.append(BatchResult("error", error=exc))
    return _with_shas(git, tip, out)


def _commit_one(writer: WriteBack, git: Git, item: BatchItem) -> BatchResult:
    """Run one item's change and commit it (committed or unchanged; raises otherwise)."""
    item.change(git.cwd)
    git.run("add", "-A")
    # Commit first, ask after: a change almost always stages something, and
    # each git process is a share of a busy pass (issue 31). A refused commit
    # with nothing staged is `unchanged`; with something staged, an error.
    refused = writer._commit_staged(git, item.message, check=False)
    if refused is None:
        return BatchResult("committed")
    if git.ok("diff", "--cached", "--quiet"):
        return BatchResult("unchanged")
    raise GitError(redact(f"git commit failed: {refused}"))


def _with_shas(git: Git, tip: str, results: list[BatchResult]) -> list[BatchResult]:
    """Fill in the committed items' shas from one `rev-list` (history is linear)."""
    shas = git.out("rev-list", "--reverse", f"{tip}..HEAD").split()
    committed = [i for i, r in enumerate(results) if r.status == "committed"]
    if len(shas) != len(committed):  # cannot happen: every commit above is one of ours
        raise GitError(f"batch made {len(committed)} commits, but {len(shas)} are on top of {tip}")
    for index, sha in zip(committed, shas):
        results[index] = dataclasses.replace(results[index], commit=sha)
    return results


def commit_batch(writer: WriteBack, branch: str,
                 items: Sequence[BatchItem]) -> list[BatchResult]:
    """Commit each item on `branch` (one commit per item) and push them in one push."""
    if not items:
        return []
    with writer._clone(branch) as git:
        for attempt in range(1, writer.backoff.tries + 1):
            if attempt > 1:
                writer.sleep(writer.backoff.delay(attempt))
                writer._fetch(git)
            tip = writer._remote_sha(git, branch)
            if tip is None:
                raise GitError(f"branch {branch!r} does not exist in {writer.remote.display}")
            results = _apply(writer, git, tip, items)
            if not any(r.status == "committed" for r in results):
                return [dataclasses.replace(r, attempts=attempt) for r in results]
            proc = git.run("push", "--porcelain", "--no-verify", "origin",
                           f"HEAD:refs/heads/{branch}", check=False)
            if proc.returncode == 0:
                return [dataclasses.replace(r, attempts=attempt) for r in results]
            output = proc.stdout + proc.stderr
            if not _REJECTED.search(output):
                raise GitError(redact(
                    f"push to {branch!r} of {writer.remote.display} failed: {output.strip()}"))
    raise PushRejectedError(
        f"push to {branch!r} of {writer.remote.display} was rejected {writer.backoff.tries} "
        "times because the remote kept moving; nothing was forced, run again later")
