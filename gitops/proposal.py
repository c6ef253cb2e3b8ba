"""Propose a model version: a branch with its manifests plus a PR, idempotently.

``propose(repo, model, branch, files, title, body, forge)`` looks first and adopts what
exists (principles §12): ``merged`` (or, for a version that no longer serves, a fresh
numbered branch from :func:`next_branch`), ``human-edited`` (never written again), else
``opened`` / ``updated`` / ``unchanged``. The evaluated digest travels in the PR body as
an HTML comment that approval (:mod:`gitops.approval`) checks. Why: docs/guides/gitops.md.
"""

from __future__ import annotations

import json
import pathlib
import re
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Literal, Mapping, Sequence

from gitops import layout
from gitops.errors import GitError, GitOpsError
from gitops.forges.base import Forge, PullRequest
from gitops.git import DEFAULT_IDENTITY, Identity
from gitops.repo import Mirror
from gitops.writeback import DEFAULT_BACKOFF, Backoff, Message, WriteBack

ANNOTATION_WEIGHTS_SHA256 = "mlops.paddle.org/weights-sha256"  # = serving.manifests'
# The JSON holds no '<' or '>' (json.dumps of names, digests and paths): a marker-like
# text earlier in the body (training-written, say) cannot swallow the real one.
_MARKER = re.compile(r"\n*<!-- mlops:proposal (\{[^<>]*\}) -->\s*$")


@dataclass(frozen=True)
class ProposalRecord:
    """What was evaluated (the model, its version, the weights digest) and what the bot
    wrote for it: every path the branch changes with its blob sha (approval compares the
    branch against this, so an edited `model-uri` or `image:` is refused too)."""

    model: str
    version: str
    weights_sha256: str
    files: dict[str, str] | None = None


def embed_record(body: str, record: ProposalRecord | None) -> str:
    """``body`` with the record appended as an HTML comment (replacing an old one)."""
    body = _MARKER.sub("", body).rstrip() + "\n"
    if record is None:
        return body
    return body + f"\n<!-- mlops:proposal {json.dumps(asdict(record), sort_keys=True)} -->\n"


def parse_record(body: str) -> ProposalRecord | None:
    """The record embedded in a PR body, or None."""
    match = _MARKER.search(body or "")
    if match is None:
        return None
    try:
        data = json.loads(match.group(1))
        files = data.get("files")
        if files is not None and not (isinstance(files, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in files.items())):
            return None
        return ProposalRecord(str(data["model"]), str(data["version"]),
                              str(data["weights_sha256"]), files)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def record_from_files(model: str, files: Mapping[str, Any]) -> ProposalRecord | None:
    """The candidate's record from the one Deployment among ``files`` with a digest."""
    found = []
    for doc in files.values():
        if isinstance(doc, dict) and doc.get("kind") == "Deployment":
            meta = doc.get("metadata") or {}
            sha = (meta.get("annotations") or {}).get(ANNOTATION_WEIGHTS_SHA256)
            version = (meta.get("labels") or {}).get("version")
            if sha and version:
                found.append(ProposalRecord(model, version, sha))
    if len(found) > 1:
        raise GitOpsError(
            f"proposal for {model!r} holds {len(found)} Deployments with a weights digest; "
            "pass version= and weights_sha256= to say which one was evaluated"
        )
    return found[0] if found else None


def next_branch(forge: Forge, branch: str) -> tuple[str, PullRequest | None]:
    """The first of ``<branch>-2``, ``<branch>-3``... whose PR is not merged, with that PR
    (None when it has none yet): where a version proposed again after its merge goes."""
    number = 2
    while True:
        candidate = f"{branch}-{number}"
        pr = forge.find_pr(candidate)
        if pr is None or pr.state != "merged":
            return candidate, pr
        number += 1


@dataclass(frozen=True)
class Proposal:
    """The outcome of :func:`propose`."""

    status: Literal["opened", "updated", "unchanged", "human-edited", "merged"]
    branch: str
    pr: PullRequest | None
    commit: str | None
    message: str


def propose(
    repo_url: str | pathlib.Path,
    model: str,
    branch: str,
    files: Mapping[str, Any],
    title: str,
    body: str,
    forge: Forge,
    *,
    base: str = "main",
    version: str | None = None,
    weights_sha256: str | None = None,
    trailers: Sequence[tuple[str, str]] = (),
    identity: Identity = DEFAULT_IDENTITY,
    workdir: pathlib.Path | None = None,
    backoff: Backoff = DEFAULT_BACKOFF,
    sleep: Callable[[float], None] = time.sleep,
    reopen_merged: bool = False,
) -> Proposal:
    """Commit ``files`` (repo path -> dict or text) on ``branch`` and open its PR once.

    ``reopen_merged``: the caller knows the version does not serve now, so a PR
    merged earlier for ``branch`` is no reason to stop (see the module docstring).
    ``Proposal.branch`` is the branch actually used.
    """
    if version and weights_sha256:
        record: ProposalRecord | None = ProposalRecord(model, version, weights_sha256)
    else:
        record = record_from_files(model, files)
    full_body = embed_record(body, record)
    with Mirror(repo_url, identity=identity) as mirror:
        base_tip = mirror.sha(base)
        if base_tip is None:
            raise GitError(f"base branch {base!r} does not exist in {mirror.remote.display}")
        pr = forge.find_pr(branch)
        reopened = ""
        if pr is not None and pr.state == "merged":
            if not reopen_merged:
                return Proposal(
                    "merged",
                    branch,
                    pr,
                    pr.merge_commit,
                    f"PR #{pr.number} for {branch!r} is already merged; nothing to do",
                )
            reopened = (f" (PR #{pr.number} for {branch!r} was merged earlier, and the version "
                        "no longer serves: proposed afresh)")
            branch, pr = next_branch(forge, branch)
        if mirror.sha(branch) is not None:
            foreign = [
                c
                for c in mirror.log(f"origin/{base}..origin/{branch}")
                if c.author_email != identity.email
            ]
            if foreign:
                if pr is None or pr.state != "open":
                    pr = forge.open_pr(branch, base, title, full_body)
                who = ", ".join(
                    f"{c.sha[:10]} by {c.author_name} <{c.author_email}> ({c.subject!r})"
                    for c in foreign
                )
                return Proposal(
                    "human-edited",
                    branch,
                    pr,
                    None,
                    f"branch {branch!r} has commits not made by {identity.name}: {who}; "
                    "leaving it as it is (not rewriting a human's branch)",
                )
    trail = [("Mlops-Proposal", f"{model}/{record.version}" if record else model)]
    if record is not None:
        trail.append(("Mlops-Weights-Sha256", record.weights_sha256))
    writer = WriteBack(repo_url, workdir=workdir, identity=identity, backoff=backoff, sleep=sleep)
    result = writer.commit(
        branch,
        lambda root: layout.write_files(root, files),
        Message(title, trailers=[*trail, *trailers]),
        create_from=base,
    )
    if result.status == "unchanged" and result.commit == base_tip:
        # Nothing to propose: the branch did not exist and base already has this state.
        return Proposal(
            "unchanged", branch, pr, None, f"{base!r} already holds this state; no PR needed"
        )
    if record is not None:  # what the bot's branch changes, as approval will recompute it
        with Mirror(repo_url, identity=identity) as mirror:
            head = mirror.sha(branch)
            if head is not None:
                record = ProposalRecord(record.model, record.version, record.weights_sha256,
                                        mirror.changes(f"origin/{base}", head))
        full_body = embed_record(body, record)
    if pr is not None and pr.state == "open":
        if pr.title != title or pr.body != full_body:
            pr = forge.update_pr(pr.number, title=title, body=full_body)
            return Proposal(
                "updated",
                branch,
                pr,
                result.commit,
                f"PR #{pr.number} refreshed"
                + (" with a new commit" if result.status == "committed" else ""),
            )
        status: Literal["updated", "unchanged"] = (
            "updated" if result.status == "committed" else "unchanged"
        )
        return Proposal(status, branch, pr, result.commit, f"PR #{pr.number} is {status}")
    pr = forge.open_pr(branch, base, title, full_body)
    return Proposal("opened", branch, pr, result.commit,
                    f"opened PR #{pr.number} for {branch!r}{reopened}")
