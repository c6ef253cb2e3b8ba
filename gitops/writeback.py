"""Write desired state into a git repository: commit, push, retry only a moved remote.

One call = one decision = one commit::

    wb = WriteBack("/srv/gitops.git", workdir=tmp)
    result = wb.commit("main", change, Message("canary(m): 10% -> 25% (v2 over v1)",
                                               trailers=[("Mlops-Decision", "step")]))
    result.status  # "committed" or "unchanged"

Nothing staged is ``unchanged`` (principles §12); the push never forces (principles
§11); a remote that moved is fetched and our one commit rebased onto it, a conflict is
:class:`ConflictError` naming the files, anything else :class:`GitError`. Writers are
serialised per repository and branch. Why: docs/guides/gitops.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import pathlib
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Literal, Sequence

from gitops.errors import ConflictError, GitError, PushRejectedError
from gitops.git import DEFAULT_IDENTITY, Git, Identity, Remote, format_message, redact, remote

__all__ = ["DEFAULT_BACKOFF", "Backoff", "Message", "WriteBack", "WriteResult"]


@dataclass(frozen=True)
class Backoff:
    """Bounded exponential back-off between push attempts.

    ``tries`` pushes in all; before push *n* (n >= 2) we wait
    ``min(cap, first * factor ** (n - 2))`` seconds: 1, 2, 4, ... 30, 30.
    """

    tries: int = 10
    first: float = 1.0
    factor: float = 2.0
    cap: float = 30.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait before push number ``attempt`` (2-based)."""
        return float(min(self.cap, self.first * self.factor ** max(0, attempt - 2)))


DEFAULT_BACKOFF = Backoff()


@dataclass(frozen=True)
class Message:
    """Commit message: one-line subject, optional body, machine-readable trailers."""

    subject: str
    body: str = ""
    trailers: Sequence[tuple[str, str]] = field(default_factory=tuple)


@dataclass(frozen=True)
class WriteResult:
    """What one write did: ``committed`` (sha is the new commit) or ``unchanged``."""

    status: Literal["committed", "unchanged"]
    branch: str
    commit: str | None
    attempts: int = 1


_LOCKS: dict[tuple[str, str], threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock_for(url: str, branch: str) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault((url, branch), threading.Lock())


# The remote moved: the client saw it (fetch first / non-fast-forward), or two
# pushes raced inside the server and ours lost the ref lock.
_REJECTED = re.compile(
    r"^!\s.*(\[rejected\].*\((fetch first|non-fast-forward|stale info)\)"
    r"|\[remote rejected\].*\((failed to update ref|failed to lock)\))",
    re.M,
)


class WriteBack:
    """Commits and merges pushed to one remote repository, never forced."""

    def __init__(
        self,
        repo: str | pathlib.Path,
        *,
        workdir: pathlib.Path | None = None,
        identity: Identity = DEFAULT_IDENTITY,
        backoff: Backoff = DEFAULT_BACKOFF,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.remote: Remote = remote(repo)
        self.workdir = pathlib.Path(workdir) if workdir is not None else None
        self.identity = identity
        self.backoff = backoff
        self.sleep = sleep

    # -- public -------------------------------------------------------------

    def commit(
        self,
        branch: str,
        change: Callable[[pathlib.Path], object],
        message: Message,
        *,
        create_from: str | None = None,
    ) -> WriteResult:
        """Apply ``change`` on top of ``branch`` and push one commit.

        A missing branch starts at ``create_from`` (e.g. ``main``) or, when that
        is None, as a new root (an empty repository's first commit).
        """
        with self._clone(branch) as git:
            start = self._remote_sha(git, branch)
            if start is None and create_from is not None:
                start = self._remote_sha(git, create_from)
                if start is None:
                    raise GitError(
                        f"cannot create branch {branch!r} from {create_from!r}: "
                        f"{create_from!r} does not exist in {self.remote.display}"
                    )
            if start is None:  # a new root commit: empty index, empty tree
                git.run("symbolic-ref", "HEAD", f"refs/heads/{branch}")
                git.run("update-ref", "-d", f"refs/heads/{branch}", check=False)
                git.run("read-tree", "--empty")
            else:
                git.run("checkout", "-q", "-f", "-B", branch, start)
            git.run("clean", "-q", "-ffdx")
            change(git.cwd)
            git.run("add", "-A")
            if git.ok("diff", "--cached", "--quiet"):
                return WriteResult("unchanged", branch, start)
            self._commit_staged(git, message)

            def reapply() -> bool:
                new_tip = self._remote_sha(git, branch)
                if new_tip is None:
                    return True
                proc = git.run("rebase", "-q", new_tip, check=False)
                if proc.returncode != 0:
                    files = self._conflicted(git)
                    git.run("rebase", "--abort", check=False)
                    raise ConflictError(
                        f"cannot apply {message.subject!r} to {branch!r} of {self.remote.display}: "
                        "someone changed the same lines in "
                        f"{', '.join(files) or 'the same files'}; "
                        "nothing was pushed, look at those files and run again",
                        files,
                    )
                return git.out("rev-parse", "HEAD") != new_tip

            return self._push(git, branch, reapply)

    def merge(
        self,
        source: str,
        into: str,
        message: Message,
        *,
        expect_head: str | None = None,
        check: Callable[[pathlib.Path], None] | None = None,
        author: Identity | None = None,
    ) -> WriteResult:
        """Merge branch ``source`` into ``into`` with a merge commit and push it.

        ``author``: the person the merge commit is authored by (who approved); the
        committer stays this writer's identity, as on a forge that merges for a person.

        ``expect_head`` refuses when ``source`` moved since it was verified;
        ``check(root)`` runs on the merged tree before the push and may raise to
        refuse (nothing is pushed). Already merged -> ``unchanged``.
        """
        with self._clone(into) as git:
            if author is not None:
                git.env.update(GIT_AUTHOR_NAME=author.name, GIT_AUTHOR_EMAIL=author.email)
            text = format_message(git, message.subject, message.body, message.trailers)
            msg_file = git.cwd / ".git" / "MLOPS_MERGE_MSG"

            def merge_on(tip: str) -> bool:
                src = self._remote_sha(git, source)
                if src is None:
                    raise GitError(f"branch {source!r} does not exist in {self.remote.display}")
                if expect_head is not None and src != expect_head:
                    raise GitError(
                        f"branch {source!r} moved to {src[:12]} after it was verified at "
                        f"{expect_head[:12]}; verify again"
                    )
                git.run("checkout", "-q", "-f", "-B", into, tip)
                git.run("clean", "-q", "-ffdx")
                if git.ok("merge-base", "--is-ancestor", src, "HEAD"):
                    return False
                msg_file.write_text(text)
                proc = git.run("merge", "--no-ff", "-q", "-F", str(msg_file), src, check=False)
                if proc.returncode != 0:
                    files = self._conflicted(git)
                    git.run("merge", "--abort", check=False)
                    raise ConflictError(
                        f"cannot merge {source!r} into {into!r}: conflicting changes in "
                        f"{', '.join(files) or 'some files'}; nothing was pushed, "
                        f"update {source!r} from {into!r} by hand",
                        files,
                    )
                if check is not None:
                    check(git.cwd)
                return True

            tip = self._remote_sha(git, into)
            if tip is None:
                raise GitError(f"branch {into!r} does not exist in {self.remote.display}")
            if not merge_on(tip):
                return WriteResult("unchanged", into, tip)

            def reapply() -> bool:
                new_tip = self._remote_sha(git, into)
                assert new_tip is not None
                return merge_on(new_tip)

            return self._push(git, into, reapply)

    # -- internals ----------------------------------------------------------

    def _commit_staged(self, git: Git, message: Message, *, check: bool = True) -> str | None:
        """Commit the index; with ``check=False`` a refused commit returns git's output."""
        text = format_message(git, message.subject, message.body, message.trailers)
        proc = git.run("commit", "-q", "--no-verify", "-F", "-", input=text, check=check)
        return None if proc.returncode == 0 else (proc.stderr or proc.stdout).strip()

    def _push(self, git: Git, branch: str, reapply: Callable[[], bool]) -> WriteResult:
        for attempt in range(1, self.backoff.tries + 1):
            if attempt > 1:
                self.sleep(self.backoff.delay(attempt))
                self._fetch(git)
                if not reapply():
                    return WriteResult("unchanged", branch, self._remote_sha(git, branch), attempt)
            proc = git.run(
                "push",
                "--porcelain",
                "--no-verify",
                "origin",
                f"HEAD:refs/heads/{branch}",
                check=False,
            )
            if proc.returncode == 0:
                return WriteResult("committed", branch, git.out("rev-parse", "HEAD"), attempt)
            output = proc.stdout + proc.stderr
            if not _REJECTED.search(output):
                raise GitError(
                    redact(f"push to {branch!r} of {self.remote.display} failed: {output.strip()}")
                )
        raise PushRejectedError(
            f"push to {branch!r} of {self.remote.display} was rejected {self.backoff.tries} times "
            "because the remote kept moving; nothing was forced, run again later"
        )

    @staticmethod
    def _conflicted(git: Git) -> list[str]:
        out = git.run("diff", "--name-only", "--diff-filter=U", check=False).stdout
        return sorted(line for line in out.splitlines() if line)

    def _fetch(self, git: Git) -> None:
        git.run("fetch", "-q", "--prune", "origin")

    @staticmethod
    def _remote_sha(git: Git, branch: str) -> str | None:
        proc = git.run(
            "rev-parse", "-q", "--verify", f"refs/remotes/origin/{branch}^{{commit}}", check=False
        )
        return proc.stdout.strip() or None

    @contextlib.contextmanager
    def _clone(self, branch: str) -> Iterator[Git]:
        """A fetched work clone for (repo, branch), locked for the duration."""
        with _lock_for(self.remote.url, branch):
            if self.workdir is None:
                with tempfile.TemporaryDirectory(prefix="mlops-gitops-") as tmp:
                    yield self._prepare(pathlib.Path(tmp) / "clone")
                return
            key = hashlib.sha256(f"{self.remote.url}\0{branch}".encode()).hexdigest()[:16]
            path = self.workdir / "clones" / key
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path.with_suffix(".lock"), "w") as lock_file:
                fcntl.flock(lock_file, fcntl.LOCK_EX)
                try:
                    yield self._prepare(path)
                finally:
                    fcntl.flock(lock_file, fcntl.LOCK_UN)

    def _prepare(self, path: pathlib.Path) -> Git:
        git = Git(path, identity=self.identity, credentials=self.remote.env)
        if (path / ".git").is_dir():
            url = git.run("remote", "get-url", "origin", check=False).stdout.strip()
            if url != self.remote.url:
                shutil.rmtree(path)
        if not (path / ".git").is_dir():
            path.mkdir(parents=True, exist_ok=True)
            git.run("init", "-q")
            git.run("remote", "add", "origin", self.remote.url)
        # A previous run may have died mid-rebase or mid-merge: start clean.
        if (path / ".git" / "rebase-merge").exists() or (path / ".git" / "rebase-apply").exists():
            git.run("rebase", "--abort", check=False)
        if (path / ".git" / "MERGE_HEAD").exists():
            git.run("merge", "--abort", check=False)
        self._fetch(git)
        return git
