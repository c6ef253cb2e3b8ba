"""GitHub pull requests over the REST API (v3, its version header pinned in ``_headers``).

Token from ``GITHUB_TOKEN`` (or ``GH_TOKEN``); ``api_url`` is
``https://api.github.com`` or ``https://HOST/api/v3`` for GitHub Enterprise.
A PR is merged when ``merged`` is true (GitHub's ``state`` says only
open/closed); comments go to the PR's issue. Opening a PR for a branch that
already has one (HTTP 422) returns the existing PR.

Gitea's API is shaped like GitHub's, so :class:`gitops.forges.gitea.GiteaForge`
subclasses this class; what differs between the two is kept in the class
attributes and the ``_headers``/``_find_query``/``_merge_call`` hooks.
"""

from __future__ import annotations

import os
from typing import Any

import requests

from gitops.errors import ForgeError, PullRequestNotFound
from gitops.forges._http import Api, open_or_adopt
from gitops.forges.base import PRState, PullRequest, pick_relevant
from gitops.git import Identity


class GitHubForge:
    """Pull requests on one GitHub repository (``owner/name``)."""

    name = "github"
    #: Environment variables holding the token, first match wins; the first is named in errors.
    token_envs: tuple[str, ...] = ("GITHUB_TOKEN", "GH_TOKEN")
    #: The list endpoints' page-size parameter.
    page: tuple[str, int] = ("per_page", 100)
    #: What the forge's refusal of a second PR for a branch says.
    conflict: tuple[str, ...] = ("already exists",)

    def __init__(
        self,
        repo: str,
        *,
        api_url: str = "https://api.github.com",
        token: str | None = None,
        session: requests.Session | None = None,
        **api_options: Any,
    ) -> None:
        if repo.count("/") != 1:
            raise ForgeError(f"{self.name}: repository {repo!r} must be 'owner/name'")
        self.repo = repo
        self.owner = repo.split("/")[0]
        token = token or next(filter(None, map(os.environ.get, self.token_envs)), None)
        self.api = Api(
            api_url,
            self._headers(token),
            forge=self.name,
            token_env=self.token_envs[0],
            session=session,
            **api_options,
        )

    @staticmethod
    def _headers(token: str | None) -> dict[str, str]:
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _find_query(self, branch: str) -> dict[str, Any]:
        """The list query for one branch's PRs (the caller still filters by head)."""
        return {"head": f"{self.owner}:{branch}", "state": "all", self.page[0]: self.page[1]}

    def _merge_call(self, number: int, head_sha: str | None, message: str | None) -> None:
        payload: dict[str, Any] = {"merge_method": "merge"}
        if head_sha:
            payload["sha"] = head_sha
        if message:
            payload["commit_title"] = message
        self.api.json("PUT", f"/repos/{self.repo}/pulls/{int(number)}/merge", json=payload)

    @staticmethod
    def _pr(data: dict[str, Any]) -> PullRequest:
        state: PRState = "merged" if data.get("merged") or data.get("merged_at") else data["state"]
        return PullRequest(
            number=int(data["number"]),
            title=data.get("title") or "",
            body=data.get("body") or "",
            branch=data["head"]["ref"],
            base=data["base"]["ref"],
            state=state,
            url=data.get("html_url") or "",
            head_sha=data["head"].get("sha"),
            merge_commit=data.get("merge_commit_sha") if state == "merged" else None,
        )

    def open_pr(self, branch: str, base: str, title: str, body: str) -> PullRequest:
        payload = {"title": title, "head": branch, "base": base, "body": body}
        return open_or_adopt(
            self,
            branch,
            lambda: self._pr(self.api.json("POST", f"/repos/{self.repo}/pulls", json=payload)),
            self.conflict,
        )

    def find_pr(self, branch: str) -> PullRequest | None:
        prs = [
            self._pr(d)
            for d in self.api.paginate(f"/repos/{self.repo}/pulls", self._find_query(branch))
            if d["head"]["ref"] == branch
        ]
        return pick_relevant(prs)

    def get_pr(self, number: int) -> PullRequest:
        return self._pr(self.api.json("GET", f"/repos/{self.repo}/pulls/{int(number)}"))

    def list_prs(self, state: PRState | None = "open") -> list[PullRequest]:
        query = {"open": "open", "merged": "closed", "closed": "closed", None: "all"}[state]
        prs = [
            self._pr(d)
            for d in self.api.paginate(
                f"/repos/{self.repo}/pulls", {"state": query, self.page[0]: self.page[1]}
            )
        ]
        return sorted(
            (p for p in prs if state is None or p.state == state), key=lambda p: -p.number
        )

    def update_pr(
        self, number: int, *, title: str | None = None, body: str | None = None
    ) -> PullRequest:
        payload = {k: v for k, v in (("title", title), ("body", body)) if v is not None}
        return self._pr(
            self.api.json("PATCH", f"/repos/{self.repo}/pulls/{int(number)}", json=payload)
        )

    def comment(self, number: int, body: str) -> None:
        self.api.json(
            "POST", f"/repos/{self.repo}/issues/{int(number)}/comments", json={"body": body}
        )

    def merge(
        self, number: int, *, head_sha: str | None = None, message: str | None = None,
        author: Identity | None = None,
    ) -> PullRequest:
        pr = self.get_pr(number)
        if pr.state == "merged":
            return pr
        if pr.state == "closed":
            raise ForgeError(f"{self.name}: PR #{number} is closed; reopen it before merging")
        if author is not None and message is None:  # the API merges as the token's owner
            message = f"Merge pull request #{number} (approved by {author.name})"
        self._merge_call(number, head_sha, message)
        return self.get_pr(number)


__all__ = ["GitHubForge", "PullRequestNotFound"]
