"""GitHub pull requests over the REST API (v3, ``2022-11-28``).

Token from ``GITHUB_TOKEN`` (or ``GH_TOKEN``); ``api_url`` is
``https://api.github.com`` or ``https://HOST/api/v3`` for GitHub Enterprise.
A PR is merged when ``merged`` is true (GitHub's ``state`` says only
open/closed); comments go to the PR's issue. Opening a PR for a branch that
already has one (HTTP 422) returns the existing PR.
"""

from __future__ import annotations

import os
from typing import Any

import requests

from gitops.errors import ForgeError, PullRequestNotFound
from gitops.forges._http import Api
from gitops.forges.base import PRState, PullRequest, pick_relevant


class GitHubForge:
    """Pull requests on one GitHub repository (``owner/name``)."""

    name = "github"

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
            raise ForgeError(f"github: repository {repo!r} must be 'owner/name'")
        self.repo = repo
        self.owner = repo.split("/")[0]
        token = token or os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN")
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.api = Api(
            api_url,
            headers,
            forge="github",
            token_env="GITHUB_TOKEN",
            session=session,
            **api_options,
        )

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
        existing = self.find_pr(branch)
        if existing is not None and existing.state == "open":
            return existing
        payload = {"title": title, "head": branch, "base": base, "body": body}
        try:
            return self._pr(self.api.json("POST", f"/repos/{self.repo}/pulls", json=payload))
        except ForgeError as exc:
            if "already exists" in str(exc):
                found = self.find_pr(branch)
                if found is not None:
                    return found
            raise

    def find_pr(self, branch: str) -> PullRequest | None:
        params = {"head": f"{self.owner}:{branch}", "state": "all", "per_page": 100}
        prs = [
            self._pr(d)
            for d in self.api.paginate(f"/repos/{self.repo}/pulls", params)
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
                f"/repos/{self.repo}/pulls", {"state": query, "per_page": 100}
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
        self, number: int, *, head_sha: str | None = None, message: str | None = None
    ) -> PullRequest:
        pr = self.get_pr(number)
        if pr.state == "merged":
            return pr
        if pr.state == "closed":
            raise ForgeError(f"github: PR #{number} is closed; reopen it before merging")
        payload: dict[str, Any] = {"merge_method": "merge"}
        if head_sha:
            payload["sha"] = head_sha
        if message:
            payload["commit_title"] = message
        self.api.json("PUT", f"/repos/{self.repo}/pulls/{int(number)}/merge", json=payload)
        return self.get_pr(number)


__all__ = ["GitHubForge", "PullRequestNotFound"]
