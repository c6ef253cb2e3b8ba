"""`mlops pr ...`: pull requests as approvals.

* ``mlops pr list [--state open|merged|closed|all]``
* ``mlops pr show N``
* ``mlops pr approve N [--by WHO]`` -- verifies the evaluated weights digest on the
  merged tree, then merges with a merge commit authored by WHO (default: the current
  user; see :mod:`gitops.approval`).

``--gitops`` (default ``$MLOPS_GITOPS_REPO``) is the GitOps repo; ``--forge``
(default ``$MLOPS_FORGE`` or ``local``) picks the backend. Hosted forges take
``owner/name`` and the API root from the repo's https URL, or from
``--forge-repo`` and ``--forge-api`` (``$MLOPS_FORGE_REPO`` /
``$MLOPS_FORGE_API``), and a token in their usual variable (``GITHUB_TOKEN``,
``GITLAB_TOKEN``, ``GITEA_TOKEN``).
"""

from __future__ import annotations

import argparse
from typing import Any

from cogs.text import printable
from mlops.commands._options import DEFAULT_FORGE, forge_options, gitops_option, require_gitops
from mlops.errors import UserError


def forge_from_args(args: argparse.Namespace) -> Any:
    """The forge the options name (local needs only the repo)."""
    from gitops.forges import registry

    name = args.forge or DEFAULT_FORGE
    if name == "local":
        return registry.create("local", require_gitops(args))
    if name not in registry.names():
        return registry.create(name)  # raises, listing the choices
    if not args.forge_repo and "://" not in (args.gitops or ""):
        raise UserError(
            f"--forge {name} needs --forge-repo (or MLOPS_FORGE_REPO), e.g. owner/name, "
            "or --gitops with the GitOps repo's https URL"
        )
    # owner/name and the API root default to what the repo's URL says.
    return registry.for_gitops(
        name, args.gitops or "", args.forge_api, args.forge_repo, api_flag="--forge-api"
    )


def _list(args: argparse.Namespace) -> int:
    forge = forge_from_args(args)
    prs = forge.list_prs(None if args.state == "all" else args.state)
    if not prs:
        print(f"no {'' if args.state == 'all' else args.state + ' '}pull requests")
    for pr in prs:
        print(printable(f"#{pr.number:<4} {pr.state:<7} {pr.branch} -> {pr.base}  {pr.title}",
                        lines=False))
    return 0


def _show(args: argparse.Namespace) -> int:
    from gitops.proposal import parse_record

    forge = forge_from_args(args)
    pr = forge.get_pr(args.number)
    # Everything below is someone else's text (the title, the body the propose step
    # built from the pushed repo's dataset and class names, comments): one line each
    # through `cogs.text`, so a control sequence in it is shown, not obeyed (cursor
    # moves would rewrite the lines above, OSC 52 the clipboard).
    out = [printable(f"#{pr.number} {pr.title}", lines=False),
           f"state:  {printable(pr.state, lines=False)}",
           printable(f"branch: {pr.branch} -> {pr.base} (head {str(pr.head_sha)[:12]})",
                     lines=False)]
    if pr.merge_commit:
        out.append(f"merged: {printable(pr.merge_commit[:12])}")
    if pr.url:
        out.append(printable(f"url:    {pr.url}", lines=False))
    record = parse_record(pr.body)
    if record is not None:
        out.append(printable(f"evaluated: {record.model} {record.version} weights sha256 "
                             f"{record.weights_sha256}", lines=False))
    out += ["", printable(pr.body.rstrip())]
    comments = getattr(forge, "comments", None)
    if callable(comments):
        for note in comments(pr.number):
            author = printable(str(note.get("author", "?")), lines=False)
            out += [f"\n--- comment by {author}", printable(str(note.get("body", "")).rstrip())]
    print("\n".join(out))
    return 0


def _approve(args: argparse.Namespace) -> int:
    from gitops.approval import approve_as
    from gitops.people import current_user

    forge = forge_from_args(args)
    print(approve_as(require_gitops(args), args.number, forge, current_user(args.by)))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("pr", help="pull requests: list, show, approve")
    sub = parser.add_subparsers(dest="pr_command", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        gitops_option(p)
        forge_options(p)

    lst = sub.add_parser("list", help="list pull requests")
    common(lst)
    lst.add_argument("--state", choices=["open", "merged", "closed", "all"], default="open")
    lst.set_defaults(func=_list)

    show = sub.add_parser("show", help="show one pull request")
    show.add_argument("number", type=int, metavar="N")
    common(show)
    show.set_defaults(func=_show)

    appr = sub.add_parser("approve", help="check the evaluated digest, then merge PR N")
    appr.add_argument("number", type=int, metavar="N")
    appr.add_argument("--by", help="who approves: the merge commit's author, as `Name` or "
                                   "`Name <mail>` (default: the current user)")
    common(appr)
    appr.set_defaults(func=_approve)
