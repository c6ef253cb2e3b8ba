"""GitLab merge requests over the REST API (v4).

Token from ``GITLAB_TOKEN`` (sent as ``PRIVATE-TOKEN``); ``api_url`` is
``https://gitlab.com/api/v4`` or your instance's. ``project`` is the path
(``group/sub/name``) and is URL-encoded as GitLab wants. A merge request's
``iid`` is our PR number; ``opened``/``locked`` map to open. Comments are
notes. An existing open MR for the branch (HTTP 409) is returned instead.
"""

from __future__ import annotations

import os
import urllib.parse
from typing import Any

import requests

from gitops.errors import ForgeError
from gitops.forges._http import Api, open_or_adopt
from gitops.forges.base import PRState, PullRequest, pick_relevant
from gitops.git import Identity

_STATES: dict[str, PRState] = {
    "opened": "open",
    "locked": "open",
    "merged": "merged",
    "closed": "closed",
}


class GitLabForge:
    """Merge requests on one GitLab project."""

    name = "gitlab"

    def __init__(
        self,
        project: str,
        *,
        api_url: str = "https://gitlab.com/api/v4",
        token: str | None = None,
        session: requests.Session | None = None,
        **api_options: Any,
    ) -> None:
        if "/" not in project:
            raise ForgeError(f"gitlab: project {project!r} must be a path like 'group/name'")
        self.project = project
        self._id = urllib.parse.quote(project, safe="")
        token = token or os.environ.get("GITLAB_TOKEN")
        headers = {"PRIVATE-TOKEN": token} if token else {}
        self.api = Api(
            api_url,
            headers,
            forge="gitlab",
            token_env="GITLAB_TOKEN",
            session=session,
            **api_options,
        )

    @property
    def _base(self) -> str:
        return f"/projects/{self._id}/merge_requests"

    @staticmethod
    def _pr(data: dict[str, Any]) -> PullRequest:
        state = _STATES.get(data.get("state", ""), "closed")
        return PullRequest(
            number=int(data["iid"]),
            title=data.get("title") or "",
            body=data.get("description") or "",
            branch=data["source_branch"],
            base=data["target_branch"],
            state=state,
            url=data.get("web_url") or "",
            head_sha=data.get("sha"),
            merge_commit=data.get("merge_commit_sha"),
        )

    def open_pr(self, branch: str, base: str, title: str, body: str) -> PullRequest:
        payload = {
            "source_branch": branch,
            "target_branch": base,
            "title": title,
            "description": body,
        }
        return open_or_adopt(
            self, branch, lambda: self._pr(self.api.json("POST", self._base, json=payload))
        )

    def find_pr(self, branch: str) -> PullRequest | None:
        prs = [
            self._pr(d)
            for d in self.api.paginate(self._base, {"source_branch": branch, "per_page": 100})
            if d["source_branch"] == branch
        ]
        return pick_relevant(prs)

    def get_pr(self, number: int) -> PullRequest:
        return self._pr(self.api.json("GET", f"{self._base}/{int(number)}"))

    def list_prs(self, state: PRState | None = "open") -> list[PullRequest]:
        params: dict[str, Any] = {"per_page": 100}
        if state is not None:
            params["state"] = {"open": "opened", "merged": "merged", "closed": "closed"}[state]
        prs = [self._pr(d) for d in self.api.paginate(self._base, params)]
        return sorted(
            (p for p in prs if state is None or p.state == state), key=lambda p: -p.number
        )

    def update_pr(
        self, number: int, *, title: str | None = None, body: str | None = None
    ) -> PullRequest:
        payload = {k: v for k, v in (("title", title), ("description", body)) if v is not None}
        return self._pr(self.api.json("PUT", f"{self._base}/{int(number)}", json=payload))

    def comment(self, number: int, body: str) -> None:
        self.api.json("POST", f"{self._base}/{int(number)}/notes", json={"body": body})

    def merge(
        self, number: int, *, head_sha: str | None = None, message: str | None = None,
        author: Identity | None = None,
    ) -> PullRequest:
        pr = self.get_pr(number)
        if pr.state == "merged":
            return pr
        if pr.state == "closed":
            raise ForgeError(f"gitlab: MR !{number} is closed; reopen it before merging")
        payload: dict[str, Any] = {}
        if head_sha:
            payload["sha"] = head_sha
        if author is not None and message is None:  # the API merges as the token's owner
            message = f"Merge request !{number} (approved by {author.name})"
        if message:
            payload["merge_commit_message"] = message
        return self._pr(self.api.json("PUT", f"{self._base}/{int(number)}/merge", json=payload))
