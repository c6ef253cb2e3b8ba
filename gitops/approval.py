"""Approve a proposal: merge its PR, but only if it deploys the evaluated weights.

The check is made on the *merged* tree, computed before anything is pushed
(``git merge-tree --write-tree`` of the PR head into the base): the Deployment
``apps/<model>/deployment-<version>.yaml`` must carry the
``mlops.paddle.org/weights-sha256`` recorded in the PR body when it was
proposed (:func:`gitops.proposal.parse_record`). A mismatch -- someone edited
the digest or swapped the weights on the branch -- raises
:class:`DigestMismatchError` and nothing is merged. The merge itself goes
through the forge with ``head_sha`` pinned to the verified commit, so a push to
the branch after the check makes the forge refuse rather than merge unverified
content.

:func:`approve_as` is what `mlops pr approve N` and the UI's Approve call: the
merge is authored by the person who approved (the local forge writes them as the
merge commit's author; a hosted forge merges as its token's owner and names them
in the title), and the PR gets a comment saying who approved and from where. The
comment is a courtesy: merged is merged, so a comment that fails is reported in
the returned line, not raised.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Literal

from contracts.errors import MlopsError
from gitops import yamlio
from gitops.errors import DigestMismatchError, ForgeError, GitError
from gitops.forges.base import Forge, PullRequest
from gitops.git import DEFAULT_IDENTITY, Identity
from gitops.people import identity_of
from gitops.proposal import ANNOTATION_WEIGHTS_SHA256, ProposalRecord, parse_record
from gitops.repo import Mirror


@dataclass(frozen=True)
class Approval:
    """Outcome of :func:`approve`."""

    status: Literal["merged", "already-merged"]
    pr: PullRequest
    message: str


def check_digest(text: str | None, path: str, record: ProposalRecord, number: int) -> None:
    """Refuse unless the Deployment text at ``path`` carries the recorded digest."""
    if text is None:
        raise DigestMismatchError(
            f"PR #{number}: the merged tree has no {path}; the evaluated version "
            f"{record.version} would not be deployed; refusing to merge"
        )
    doc = yamlio.parse(text, path)
    annotations = ((doc[0] if doc else {}).get("metadata") or {}).get("annotations") or {}
    found = annotations.get(ANNOTATION_WEIGHTS_SHA256)
    if found != record.weights_sha256:
        raise DigestMismatchError(
            f"PR #{number}: {path} carries weights sha256 {found!r} but the evaluated digest is "
            f"{record.weights_sha256!r}; refusing to merge (re-run the evaluation for these "
            "weights, or restore the evaluated ones)"
        )


def check_files(found: dict[str, str], record: ProposalRecord, number: int) -> None:
    """Refuse unless the branch changes exactly the files, with exactly the content, that
    propose recorded."""
    wanted = record.files or {}
    differ = sorted(p for p in set(found) | set(wanted) if found.get(p) != wanted.get(p))
    if differ:
        raise DigestMismatchError(
            f"PR #{number}: the branch differs from what propose wrote in "
            f"{', '.join(differ)}; refusing to merge (delete the branch and propose again)")


def approve(
    repo_url: str | pathlib.Path,
    number: int,
    forge: Forge,
    *,
    identity: Identity = DEFAULT_IDENTITY,
    author: Identity | None = None,
) -> Approval:
    """Verify the evaluated digest on the would-be merge, then merge PR ``number``
    (authored by ``author``, the approver, where the forge allows it)."""
    pr = forge.get_pr(number)
    if pr.state == "merged":
        return Approval("already-merged", pr, f"PR #{number} was already merged")
    if pr.state == "closed":
        raise ForgeError(f"PR #{number} is closed; nothing to approve")
    record = parse_record(pr.body)
    with Mirror(repo_url, identity=identity) as mirror:
        head = mirror.sha(pr.branch)
        if head is None:
            raise GitError(
                f"PR #{number}: branch {pr.branch!r} is missing in {mirror.remote.display}"
            )
        base = mirror.sha(pr.base)
        if base is None:
            raise GitError(f"PR #{number}: base {pr.base!r} is missing in {mirror.remote.display}")
        if record is None:
            raise DigestMismatchError(
                f"PR #{number}: its body carries no mlops:proposal record (the evaluated "
                "digest and the files the bot wrote); refusing to merge what was never "
                "checked (propose again to rewrite the PR)")
        # The evaluated digest first (the most specific refusal), then who wrote the
        # branch, then every file it changes.
        tree = mirror.merge_tree(base, head)
        path = f"apps/{record.model}/deployment-{record.version}.yaml"
        check_digest(mirror.show(tree, path), path, record, number)
        others = [c for c in mirror.log(f"{base}..{head}") if c.author_email != identity.email]
        if others:
            who = ", ".join(f"{c.sha[:10]} by {c.author_name} <{c.author_email}>" for c in others)
            raise DigestMismatchError(
                f"PR #{number}: branch {pr.branch!r} was edited by hand ({who}); approval "
                "merges only what propose wrote: delete the branch and propose again, or "
                "merge it on the forge yourself if the edit is meant")
        if record.files is not None:
            check_files(mirror.changes(base, head), record, number)
        checked = f"{path} carries the evaluated weights sha256 {record.weights_sha256[:12]}…"
        if record.files is not None:
            checked += f"; the branch changes exactly the {len(record.files)} file(s) proposed"
    merged = forge.merge(number, head_sha=head, author=author)
    if merged.state != "merged":
        raise ForgeError(f"PR #{number}: the forge did not merge it (state {merged.state})")
    return Approval("merged", merged, f"merged PR #{number}; {checked}")


def approve_as(repo: str | pathlib.Path, number: int, forge: Forge, by: str,
               where: str = "the CLI") -> str:
    """Check, merge as `by`, note it on the PR; the line the CLI prints and the UI shows."""
    result = approve(repo, number, forge, author=identity_of(by))
    message = result.message
    if result.status == "merged":
        try:
            forge.comment(number, f"Approved by {by} in {where}: {message}")
        except MlopsError as exc:
            message += f" (note not added: {exc})"
    return f"{message} (approved by {by})"
