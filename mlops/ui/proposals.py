"""The Proposals page's data: the forge's pull requests with their evaluation record.

The PRs come from the forge `mlops pr list` uses (the local forge: a PR is a
branch plus a record on the GitOps repo); the evaluated digest comes from the
PR body's `mlops:proposal` record (`gitops.proposal.parse_record`, what
`mlops pr approve` checks). The body is the evaluation report in Markdown; the
page renders it.
"""

from __future__ import annotations

from typing import Any, Sequence

from gitops.forges.base import PullRequest
from gitops.proposal import parse_record


def pr_view(pr: PullRequest, comments: Sequence[dict[str, str]] = ()) -> dict[str, Any]:
    """One PR as the page shows it."""
    record = parse_record(pr.body)
    return {
        "number": pr.number, "title": pr.title, "state": pr.state, "branch": pr.branch,
        "base": pr.base, "url": pr.url, "head_sha": pr.head_sha,
        "merge_commit": pr.merge_commit, "body": pr.body,
        "record": None if record is None else {
            "model": record.model, "version": record.version,
            "weights_sha256": record.weights_sha256},
        "comments": [{"author": c.get("author", "?"), "body": c.get("body", "")}
                     for c in comments],
    }


def proposals_view(forge: Any, states: Sequence[str] = ("open", "merged")) -> list[dict[str, Any]]:
    """Open PRs first, then merged ones, newest first within each."""
    comments = getattr(forge, "comments", None)
    out = []
    for state in states:
        for pr in sorted(forge.list_prs(state), key=lambda p: -p.number):
            notes = comments(pr.number) if callable(comments) else []
            out.append(pr_view(pr, notes))
    return out
