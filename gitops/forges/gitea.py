"""Gitea (and Forgejo) pull requests over the REST API (v1).

Gitea's API is shaped like GitHub's (same paths below ``/repos``, same PR
JSON: ``merged`` tells merged from closed), so :class:`GiteaForge` is a
:class:`~gitops.forges.github.GitHubForge` with these differences:

- token from ``GITEA_TOKEN``, sent as ``Authorization: token ...``; ``api_url``
  (``https://HOST/api/v1``) is required, there is no public default;
- pages are sized with ``limit`` (50), and the list endpoint cannot filter by
  head branch, so :meth:`find_pr` pages through all PRs and filters;
- a second PR for a branch is refused with HTTP 409;
- merging posts ``Do: merge`` with ``head_commit_id``, so a moved branch is
  refused (HTTP 409).
"""

from __future__ import annotations

from typing import Any

import requests

from gitops.forges.github import GitHubForge


class GiteaForge(GitHubForge):
    """Pull requests on one Gitea repository (``owner/name``)."""

    name = "gitea"
    token_envs = ("GITEA_TOKEN",)
    page = ("limit", 50)
    conflict = ("HTTP 409", "already exists")

    def __init__(
        self,
        repo: str,
        *,
        api_url: str,
        token: str | None = None,
        session: requests.Session | None = None,
        **api_options: Any,
    ) -> None:
        super().__init__(repo, api_url=api_url, token=token, session=session, **api_options)

    @staticmethod
    def _headers(token: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"token {token}"
        return headers

    def _find_query(self, branch: str) -> dict[str, Any]:
        return {"state": "all", self.page[0]: self.page[1]}

    def _merge_call(self, number: int, head_sha: str | None, message: str | None) -> None:
        payload: dict[str, Any] = {"Do": "merge"}
        if head_sha:
            payload["head_commit_id"] = head_sha
        if message:
            payload["MergeTitleField"] = message
        self.api.request("POST", f"/repos/{self.repo}/pulls/{int(number)}/merge", json=payload)
