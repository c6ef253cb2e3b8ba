"""Gitea (and Forgejo) pull requests over the REST API (v1).

Token from ``GITEA_TOKEN`` (sent as ``Authorization: token ...``); ``api_url``
is ``https://HOST/api/v1``. Gitea's list endpoint cannot filter by head
branch, so :meth:`find_pr` pages through the repository's PRs (``limit=50``)
and filters; ``merged`` tells merged from closed. Merging posts
``Do: merge`` with ``head_commit_id`` so a moved branch is refused (HTTP 409).
"""

from __future__ import annotations

import os
from typing import Any

import requests

from gitops.errors import ForgeError
from gitops.forges._http import Api
from gitops.forges.base import PRState, PullRequest, pick_relevant


class GiteaForge:
    """Pull requests on one Gitea repository (``owner/name``)."""

    name = "gitea"

    def __init__(
        self,
        repo: str,
        *,
        api_url: str,
        token: str | None = None,
        session: requests.Session | None = None,
        **api_options: Any,
    ) -> None:
        if repo.count("/") != 1:
            raise ForgeError(f"gitea: repository {repo!r} must be 'owner/name'")
        self.repo = repo
        token = token or os.environ.get("GITEA_TOKEN")
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"token {token}"
        self.api = Api(
            api_url, headers, forge="gitea", token_env="GITEA_TOKEN", session=session, **api_options
        )

    @staticmethod
    def _pr(data: dict[str, Any]) -> PullRequest:
        state: PRState = "merged" if data.get("merged") else data["state"]
        return PullRequest(
            number=int(data["number"]),
            title=data.get("title") or "",
            body=data.get("body") or "",
            branch=data["head"]["ref"],
            base=data["base"]["ref"],
            state=state,
            url=data.get("html_url") or "",
            head_sha=data["head"].get("sha"),
            merge_commit=data.get("merge_commit_sha"),
        )

    def open_pr(self, branch: str, base: str, title: str, body: str) -> PullRequest:
        existing = self.find_pr(branch)
        if existing is not None and existing.state == "open":
            return existing
        payload = {"head": branch, "base": base, "title": title, "body": body}
        try:
            return self._pr(self.api.json("POST", f"/repos/{self.repo}/pulls", json=payload))
        except ForgeError as exc:
            if "HTTP 409" in str(exc) or "already exists" in str(exc):
                found = self.find_pr(branch)
                if found is not None:
                    return found
            raise

    def find_pr(self, branch: str) -> PullRequest | None:
        prs = [
            self._pr(d)
            for d in self.api.paginate(f"/repos/{self.repo}/pulls", {"state": "all", "limit": 50})
            if d["head"]["ref"] == branch
        ]
        return pick_relevant(prs)

    def get_pr(self, number: int) -> PullRequest:
        return self._pr(self.api.json("GET", f"/repos/{self.repo}/pulls/{int(number)}"))

    def list_prs(self, state: PRState | None = "open") -> list[PullRequest]:
        query = {"open": "open", "merged": "closed", "closed": "closed", None: "all"}[state]
        prs = [
            self._pr(d)
            for d in self.api.paginate(f"/repos/{self.repo}/pulls", {"state": query, "limit": 50})
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
            raise ForgeError(f"gitea: PR #{number} is closed; reopen it before merging")
        payload: dict[str, Any] = {"Do": "merge"}
        if head_sha:
            payload["head_commit_id"] = head_sha
        if message:
            payload["MergeTitleField"] = message
        self.api.request("POST", f"/repos/{self.repo}/pulls/{int(number)}/merge", json=payload)
        return self.get_pr(number)
