"""Read the GitOps repo's main branch with the git CLI.

``head()`` is one ``git ls-remote`` (cheap enough to run twice a second, and
it works the same for a local bare repo and a remote URL); only when the sha
moved does ``files(sha)`` fetch into a private bare cache in the work dir and
exports that one commit (``git archive``) into a temp dir to be parsed. The sync never checks
out a working tree, so it can never modify the repo, and it reads exactly one commit.

Authentication for remote URLs: `gitops.git`'s (a token in the URL is split
out and travels in the environment, as does `MLOPS_GIT_TOKEN`; git reads it
through an inline credential helper). Nothing is written into the cache's
config, and every message is redacted.
"""

from __future__ import annotations

import io
import pathlib
import subprocess
import tarfile

from gitops.archive import extract
from gitops.git import Git, redact, remote

_GIT_ENV_TIMEOUT = 30.0


class GitSourceError(RuntimeError):
    """The GitOps repo could not be read (message says which command failed)."""


class GitSource:
    """The ``branch`` of ``repo`` (a path or URL), cached under ``cache``."""

    def __init__(self, repo: str, branch: str, cache: pathlib.Path) -> None:
        self.remote = remote(repo)
        self.repo = self.remote.url  # never a token: that travels in the runner's env
        self.branch = branch
        self.cache = cache
        self._runner = Git(cache, credentials=self.remote.env, timeout=_GIT_ENV_TIMEOUT)

    def _git(
        self, *args: str, cwd: pathlib.Path | None = None, stdin: bytes | None = None
    ) -> bytes:
        where = self.remote.display
        try:
            done = subprocess.run(
                self._runner.argv(*args),
                cwd=str(cwd) if cwd else None,
                env=self._runner.env,
                input=stdin,
                capture_output=True,
                timeout=_GIT_ENV_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise GitSourceError(f"git {args[0]} timed out on {where}") from None
        if done.returncode != 0:
            err = redact(done.stderr.decode(errors="replace").strip())
            raise GitSourceError(f"git {args[0]} failed on {where}: {err}")
        return done.stdout

    def head(self) -> str | None:
        """Sha of the branch, or None if the branch does not exist yet."""
        out = self._git("ls-remote", self.repo, f"refs/heads/{self.branch}").decode()
        for line in out.splitlines():
            sha, _, ref = line.partition("\t")
            if ref == f"refs/heads/{self.branch}":
                return sha
        return None

    def _ensure_cache(self) -> None:
        if not (self.cache / "HEAD").exists():
            self.cache.mkdir(parents=True, exist_ok=True)
            self._git("init", "--bare", "--quiet", str(self.cache))

    def folders(self, sha: str, parent: str = "apps") -> dict[str, str]:
        """Folder name -> git tree id of each folder in ``parent`` at ``sha`` (fetched if needed).

        Equal ids mean equal content: the sync re-reads only the models whose id moved.
        """
        self._fetch(sha)
        out = self._git("ls-tree", sha, f"{parent}/", cwd=self.cache).decode()
        trees = {}
        for line in out.splitlines():
            meta, _, path = line.partition("\t")
            kind, obj = meta.split()[1:3]
            if kind == "tree":
                trees[path.rpartition("/")[2]] = obj
        return trees

    def export(self, sha: str, dest: pathlib.Path, paths: tuple[str, ...] = ()) -> None:
        """Write the tree of commit ``sha`` (only ``paths`` when given) into ``dest``."""
        self._fetch(sha)
        archive = self._git("archive", "--format=tar", sha, "--", *paths, cwd=self.cache)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            extract(tar, dest)

    def _fetch(self, sha: str) -> None:
        """Have commit ``sha`` in the cache."""
        self._ensure_cache()
        have = subprocess.run(
            ["git", "cat-file", "-e", f"{sha}^{{commit}}"],
            cwd=self.cache, capture_output=True, check=False,
        )
        if have.returncode != 0:
            self._git(
                "fetch", "--quiet", "--no-tags", self.repo,
                f"+refs/heads/{self.branch}:refs/remotes/gitops/{self.branch}",
                cwd=self.cache,
            )
