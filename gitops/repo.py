"""Create a GitOps repository and read any of its commits without a work tree.

* :func:`init_repo` -- ``mlops gitops init DIR|URL``: a local path becomes a
  bare repository (the local platform's "remote"); a URL must point at an
  existing (possibly empty) repository. The skeleton from
  :func:`gitops.layout.init_tree` is committed to ``main`` through the
  write-back, so it is idempotent and never forced.
* :class:`Mirror` -- a bare cache clone for *reading*: resolve refs, show a
  file at a commit, list commits with their trailers, test ancestry, compute a
  merge without touching a work tree (``git merge-tree --write-tree``), export
  a commit into a directory (what the local sync loop applies).
"""

from __future__ import annotations

import io
import logging
import pathlib
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from typing import Any, Sequence

from gitops import layout
from gitops.archive import extract
from gitops.errors import ConflictError, GitError, GitOpsError
from gitops.git import DEFAULT_IDENTITY, Git, Identity, Remote, parse_trailers, remote
from gitops.protect import protect_branch
from gitops.writeback import Backoff, Message, WriteBack, WriteResult

DEFAULT_BRANCH = "main"

log = logging.getLogger("mlops.gitops")


@dataclass(frozen=True)
class CommitInfo:
    """One commit as read back: who, what, and its ``Mlops-*`` trailers."""

    sha: str
    author_name: str
    author_email: str
    subject: str
    trailers: dict[str, str] = field(default_factory=dict)


def init_repo(
    target: str | pathlib.Path,
    *,
    repo_url: str | None = None,
    namespace: str = "models",
    branch: str = DEFAULT_BRANCH,
    identity: Identity = DEFAULT_IDENTITY,
    workdir: pathlib.Path | None = None,
) -> WriteResult:
    """Create (or complete) the GitOps repo at ``target``; ``unchanged`` if complete.

    ``repo_url`` is what Argo CD should clone (defaults to the target without
    credentials).
    """
    where = remote(target)
    if where.url.startswith("/"):
        path = pathlib.Path(where.url)
        if path.exists() and not path.is_dir():
            raise GitOpsError(f"{path} exists and is not a directory")
        if not path.exists() or not any(path.iterdir()):
            path.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                ["git", "init", "-q", "--bare", f"--initial-branch={branch}", str(path)],
                check=True,
                capture_output=True,
            )
            # The audit trail: no force push to, or deletion of, the branch.
            protect_branch(path, branch)
        elif (
            Git(path).run("rev-parse", "--is-bare-repository", check=False).stdout.strip() != "true"
        ):
            raise GitOpsError(
                f"{path} is not a bare git repository; give an empty or new directory "
                "(the GitOps repo is pushed to, so it must be bare)"
            )
    config = layout.RepoConfig(
        repo_url=repo_url or where.url, target_revision=branch, namespace=namespace
    )
    writer = WriteBack(target, identity=identity, workdir=workdir, backoff=Backoff(tries=3))
    return writer.commit(
        branch,
        lambda root: layout.init_tree(root, config),
        Message("gitops: initialise repository layout", trailers=[("Mlops-Decision", "init")]),
    )


class Mirror:
    """A bare cache clone of a remote, for reads. Use as a context manager."""

    def __init__(
        self,
        repo: str | pathlib.Path,
        *,
        path: pathlib.Path | None = None,
        identity: Identity = DEFAULT_IDENTITY,
    ) -> None:
        self.remote: Remote = remote(repo)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="mlops-mirror-")
            path = pathlib.Path(self._tmp.name)
        self.path = pathlib.Path(path)
        self.git = Git(self.path, identity=identity, credentials=self.remote.env)
        if not (self.path / "HEAD").exists():
            self.path.mkdir(parents=True, exist_ok=True)
            self.git.run("init", "-q", "--bare")
            self.git.run("remote", "add", "origin", self.remote.url)
        self.fetch()

    def __enter__(self) -> "Mirror":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def fetch(self) -> None:
        """Bring the remote branches into ``refs/remotes/origin/*``."""
        self.git.run("fetch", "-q", "--prune", "origin")

    def sha(self, branch: str) -> str | None:
        """Commit at the tip of remote ``branch`` (None if it does not exist)."""
        proc = self.git.run(
            "rev-parse", "-q", "--verify", f"refs/remotes/origin/{branch}^{{commit}}", check=False
        )
        return proc.stdout.strip() or None

    def resolve(self, rev: str) -> str:
        """A branch name (remote) or any revision -> commit sha."""
        sha = self.sha(rev)
        if sha is not None:
            return sha
        proc = self.git.run("rev-parse", "-q", "--verify", f"{rev}^{{commit}}", check=False)
        if not proc.stdout.strip():
            raise GitError(f"no branch or commit {rev!r} in {self.remote.display}")
        return proc.stdout.strip()

    def show(self, rev: str, path: str) -> str | None:
        """Text of ``path`` at ``rev`` (a commit or tree sha), None if absent."""
        proc = self.git.run("show", f"{rev}:{path}", check=False)
        return proc.stdout if proc.returncode == 0 else None

    def ls(self, rev: str, folder: str) -> list[str]:
        """File names directly inside ``folder`` at ``rev``."""
        proc = self.git.run("ls-tree", "--name-only", f"{rev}:{folder}", check=False)
        return sorted(proc.stdout.split()) if proc.returncode == 0 else []

    def is_ancestor(self, older: str, newer: str) -> bool:
        """True when ``older`` is reachable from ``newer`` (equal counts)."""
        return self.git.ok("merge-base", "--is-ancestor", older, newer)

    def log(self, rev_range: str, *, paths: Sequence[str] = (),
            first_parent: bool = False) -> list[CommitInfo]:
        """Commits in ``rev_range`` (e.g. ``a..b``), newest first, with trailers.

        ``paths`` keeps the commits that change one of them; with ``first_parent``
        the history is the branch's own (a merge counts as one commit, compared
        with the branch as it was before the merge).
        """
        sep, end = "\x1f", "\x1e"
        fmt = sep.join(["%H", "%an", "%ae", "%s", "%(trailers:only,unfold)"]) + end
        flags = ["--first-parent"] if first_parent else []
        out = self.git.run("log", f"--format={fmt}", *flags, rev_range, "--", *paths,
                           exact=True).stdout
        commits = []
        for record in out.split(end):
            record = record.strip("\n")
            if not record:
                continue
            sha, name, email, subject, trailers = record.split(sep)
            commits.append(CommitInfo(sha, name, email, subject, parse_trailers(trailers)))
        return commits

    def changes(self, base: str, head: str) -> dict[str, str]:
        """What ``head`` changes since its merge base with ``base``: path -> blob sha of the
        new content (``"deleted"`` for a removed file)."""
        merge_base = self.git.run("merge-base", base, head).stdout.strip()
        out = self.git.run("diff", "--no-renames", "--raw", "-z", merge_base, head).stdout
        fields = out.split("\0")
        found: dict[str, str] = {}
        for meta, path in zip(fields[0::2], fields[1::2]):
            if not meta.startswith(":"):
                continue
            _, _, _, new_sha, status = meta[1:].split(" ")
            found[path] = "deleted" if status.startswith("D") else new_sha
        return found

    def merge_tree(self, base: str, head: str) -> str:
        """Tree of merging ``head`` into ``base``; ConflictError names the files."""
        proc = self.git.run(
            "merge-tree", "--write-tree", "--name-only", "--no-messages", base, head, check=False
        )
        lines = proc.stdout.split("\n")
        if proc.returncode == 1:
            files = sorted({line for line in lines[1:] if line.strip()})
            raise ConflictError(
                f"merging {head[:12]} into {base[:12]} conflicts in {', '.join(files)}", files
            )
        if proc.returncode != 0:
            raise GitError(f"git merge-tree failed: {proc.stderr.strip()}")
        return lines[0].strip()

    def export(self, rev: str, dest: pathlib.Path, paths: Sequence[str] = ()) -> str:
        """Write the files of ``rev`` (only under ``paths`` when given) into ``dest``; return
        the commit (or tree) sha.

        Only regular files and directories are written. A symbolic link that
        someone committed (to ``/etc/passwd``, to another model's folder) is
        left out and logged: following it could read outside the repo, and
        refusing the whole commit would freeze every model's rollout and sync
        over one file. A model whose manifest is such a link then reads as a
        missing file, an error for that model alone, naming the file.
        """
        sha = self.sha(rev) or self.git.out("rev-parse", "--verify", rev)
        proc = subprocess.run(
            ["git", "archive", "--format=tar", sha, "--", *paths],
            cwd=self.path,
            env=self.git.env,
            capture_output=True,
        )
        if proc.returncode != 0:
            raise GitError(f"git archive {sha[:12]} failed: {proc.stderr.decode().strip()}")
        pathlib.Path(dest).mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
            members = []
            for member in tar.getmembers():
                if member.isfile() or member.isdir():
                    members.append(member)
                else:
                    log.warning("%s at %s: not a regular file (a link?); left out of the export",
                                member.name, sha[:12])
            extract(tar, dest, members)
        return sha
