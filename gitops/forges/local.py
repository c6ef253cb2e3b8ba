"""The local forge: a pull request is a branch in the bare GitOps repo plus a record.

The PR's changes live on its own branch; its record is ``prs/<N>.json`` on the orphan
branch ``mlops-prs``, written through :class:`gitops.writeback.WriteBack` (a number two
writers both picked collides as a rebase conflict, and the loser takes the next). State
is derived when read: a recorded ``merged``/``closed`` wins, else merged when the branch
tip is in the base and differs from the base at opening, closed when the branch was
deleted unmerged. Why: docs/inside-foundations.md.
"""

from __future__ import annotations

import json
import pathlib
import time
from dataclasses import asdict
from typing import Any, Callable

from gitops.errors import ConflictError, ForgeError, PullRequestNotFound
from gitops.forges.base import PRState, PullRequest, pick_relevant
from gitops.git import DEFAULT_IDENTITY, Identity
from gitops.repo import Mirror
from gitops.writeback import DEFAULT_BACKOFF, Backoff, Message, WriteBack

RECORDS_BRANCH = "mlops-prs"


class LocalForge:
    """PRs on a (bare) git repository reachable by path or URL."""

    name = "local"

    def __init__(
        self,
        repo: str | pathlib.Path,
        *,
        workdir: pathlib.Path | None = None,
        identity: Identity = DEFAULT_IDENTITY,
        backoff: Backoff = DEFAULT_BACKOFF,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.repo = repo
        self.identity = identity
        self.writer = WriteBack(
            repo, workdir=workdir, identity=identity, backoff=backoff, sleep=sleep
        )
        mirror_path = pathlib.Path(workdir) / "mirror" if workdir is not None else None
        self._mirror: Mirror | None = None
        self._mirror_path = mirror_path

    # -- reading -------------------------------------------------------------

    @property
    def mirror(self) -> Mirror:
        if self._mirror is None:
            self._mirror = Mirror(self.repo, path=self._mirror_path, identity=self.identity)
        else:
            self._mirror.fetch()
        return self._mirror

    def close(self) -> None:
        """Remove the temporary mirror (if any)."""
        if self._mirror is not None:
            self._mirror.close()
            self._mirror = None

    def _records(self, mirror: Mirror) -> dict[int, dict[str, Any]]:
        if mirror.sha(RECORDS_BRANCH) is None:
            return {}
        out = {}
        for name in mirror.ls(f"origin/{RECORDS_BRANCH}", "prs"):
            if name.endswith(".json") and name[:-5].isdigit():
                text = mirror.show(f"origin/{RECORDS_BRANCH}", f"prs/{name}") or "{}"
                try:
                    out[int(name[:-5])] = json.loads(text)
                except ValueError:
                    raise ForgeError(
                        f"local: record prs/{name} on {RECORDS_BRANCH} is not JSON"
                    ) from None
        return out

    def _derive(self, mirror: Mirror, rec: dict[str, Any]) -> PullRequest:
        state: PRState = rec.get("state", "open")
        tip = mirror.sha(rec["branch"])
        head = tip or rec.get("head_sha")
        merge_commit = rec.get("merge_commit")
        base_tip = mirror.sha(rec["base"])
        if state == "open" and head and base_tip:
            if head != rec.get("base_sha") and mirror.is_ancestor(head, base_tip):
                state = "merged"
                path = mirror.git.out(
                    "rev-list", "--ancestry-path", "--reverse", f"{head}..{base_tip}"
                ).split()
                merge_commit = path[0] if path else head
            elif tip is None:
                state = "closed"
        return PullRequest(
            number=int(rec["number"]),
            title=rec.get("title", ""),
            body=rec.get("body", ""),
            branch=rec["branch"],
            base=rec["base"],
            state=state,
            url=f"{self.writer.remote.display}#pr-{rec['number']}",
            head_sha=head,
            merge_commit=merge_commit,
        )

    def comments(self, number: int) -> list[dict[str, str]]:
        """The comments recorded on a PR (oldest first)."""
        rec = self._records(self.mirror).get(int(number))
        if rec is None:
            raise PullRequestNotFound(f"local: no pull request #{number}")
        return list(rec.get("comments", []))

    def get_pr(self, number: int, *, via: Mirror | None = None) -> PullRequest:
        mirror = via or self.mirror
        rec = self._records(mirror).get(int(number))
        if rec is None:
            raise PullRequestNotFound(
                f"local: no pull request #{number} in {self.writer.remote.display}"
            )
        return self._derive(mirror, rec)

    def list_prs(
        self, state: PRState | None = "open", *, via: Mirror | None = None
    ) -> list[PullRequest]:
        mirror = via or self.mirror
        prs = [self._derive(mirror, rec) for rec in self._records(mirror).values()]
        return sorted(
            (p for p in prs if state is None or p.state == state), key=lambda p: -p.number
        )

    def find_pr(self, branch: str, *, via: Mirror | None = None) -> PullRequest | None:
        return pick_relevant([p for p in self.list_prs(None, via=via) if p.branch == branch])

    # -- writing -------------------------------------------------------------

    def _update(self, number: int, subject: str, edit: Callable[[dict[str, Any]], None]) -> None:
        def change(root: pathlib.Path) -> None:
            path = root / "prs" / f"{number}.json"
            if not path.exists():
                raise PullRequestNotFound(f"local: no pull request #{number}")
            rec = json.loads(path.read_text())
            edit(rec)
            path.write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")

        message = Message(subject, trailers=[("Mlops-Pull-Request", str(number))])
        for attempt in range(5):
            try:
                self.writer.commit(RECORDS_BRANCH, change, message)
                return
            except ConflictError:
                # Another process edited the same record meanwhile; the edit is
                # recomputed from the fresh record, so trying again is safe.
                if attempt == 4:
                    raise

    def open_pr(self, branch: str, base: str, title: str, body: str) -> PullRequest:
        mirror = self.mirror
        existing = self.find_pr(branch, via=mirror)
        if existing is not None and existing.state == "open":
            return existing
        head, base_sha = mirror.sha(branch), mirror.sha(base)
        if head is None or base_sha is None:
            missing = branch if head is None else base
            raise ForgeError(
                f"local: branch {missing!r} does not exist in {self.writer.remote.display}"
            )
        chosen: dict[str, int] = {}

        def change(root: pathlib.Path) -> None:
            folder = root / "prs"
            folder.mkdir(exist_ok=True)
            taken = [int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit()]
            number = max(taken, default=0) + 1
            chosen["n"] = number
            rec = {
                "number": number,
                "title": title,
                "body": body,
                "branch": branch,
                "base": base,
                "state": "open",
                "base_sha": base_sha,
                "head_sha": head,
                "merge_commit": None,
                "comments": [],
            }
            (folder / f"{number}.json").write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")

        for _ in range(5):
            try:
                self.writer.commit(
                    RECORDS_BRANCH,
                    change,
                    Message(
                        f"pr: open {branch} -> {base}",
                        body=title,
                        trailers=[("Mlops-Pull-Request-Branch", branch)],
                    ),
                )
                break
            except ConflictError:
                continue  # someone took that number meanwhile: take the next one
        else:
            raise ForgeError(f"local: could not allocate a PR number for {branch!r}")
        return self.get_pr(chosen["n"])

    def update_pr(
        self, number: int, *, title: str | None = None, body: str | None = None
    ) -> PullRequest:
        def edit(rec: dict[str, Any]) -> None:
            if title is not None:
                rec["title"] = title
            if body is not None:
                rec["body"] = body

        self._update(number, f"pr #{number}: update description", edit)
        return self.get_pr(number)

    def comment(self, number: int, body: str) -> None:
        self._update(
            number,
            f"pr #{number}: comment",
            lambda rec: rec.setdefault("comments", []).append(
                {"author": self.identity.name, "body": body}
            ),
        )

    def merge(
        self, number: int, *, head_sha: str | None = None, message: str | None = None,
        author: Identity | None = None,
    ) -> PullRequest:
        pr = self.get_pr(number)
        if pr.state == "merged":
            return pr
        if pr.state == "closed":
            raise ForgeError(f"local: PR #{number} is closed (its branch {pr.branch!r} is gone)")
        result = self.writer.merge(
            pr.branch,
            pr.base,
            Message(
                message or f"Merge pull request #{number} from {pr.branch}",
                body=pr.title,
                trailers=[("Mlops-Pull-Request", str(number))],
            ),
            expect_head=head_sha,
            author=author,
        )

        def edit(rec: dict[str, Any]) -> None:
            rec["state"] = "merged"
            rec["merge_commit"] = result.commit
            rec["head_sha"] = head_sha or pr.head_sha

        self._update(number, f"pr #{number}: merged", edit)
        return self.get_pr(number)


def list_open(repo: str | pathlib.Path) -> list[dict[str, Any]]:
    """Open PRs of the GitOps repo at ``repo`` as plain dicts (for ``mlops status``)."""

    forge = LocalForge(repo)
    try:
        return [asdict(pr) for pr in forge.list_prs("open")]
    finally:
        forge.close()
