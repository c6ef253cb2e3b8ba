"""`mlops hooks init-bare|install`: `git push` to a bare model repo starts a local run."""

import argparse
import pathlib
import re

from local.argo.hooks import init_bare, install_hook
from mlops.errors import UserError


def _gitops(value: str | None) -> str | None:
    """A local GitOps repo as an absolute path: runs start in `<runs>/<sha>/`, not here."""
    if not value or "://" in value or re.match(r"^[\w.-]+@[\w.-]+:", value):
        return value  # empty (end at the gate), or a URL
    path = pathlib.Path(value).expanduser().resolve()
    if not path.is_dir():
        raise UserError(f"--gitops {value}: no such directory (create it with `mlops gitops init`)")
    return str(path)


def _options(args: argparse.Namespace) -> dict:
    return {
        "branch": args.branch,
        "bot": args.bot,
        "runs": pathlib.Path(args.runs_dir) if args.runs_dir else None,
        "gitops": _gitops(args.gitops),
        "model": args.model,
    }


def _init(args: argparse.Namespace) -> int:
    hook = init_bare(pathlib.Path(args.dir), **_options(args))
    print(f"bare repo {hook.parent.parent} ready; push to it to start a local run (hook: {hook})")
    return 0


def _install(args: argparse.Namespace) -> int:
    hook = install_hook(pathlib.Path(args.dir), **_options(args))
    print(f"installed {hook}")
    return 0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", help="bare git repository")
    parser.add_argument("--branch", default="main", help="the branch whose pushes are trained")
    parser.add_argument(
        "--bot", default="mlops-bot", help="author name/email whose commits never train"
    )
    parser.add_argument(
        "--gitops", help="GitOps repo (path or URL) runs propose candidates to (default: none)"
    )
    parser.add_argument("--runs-dir", help="where runs go (default: <bare repo>/mlops-runs)")
    parser.add_argument("--model", help="the model this repo publishes: a push whose "
                        "mlops.yaml names another is refused (default: not bound)")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops hooks`."""
    group = subparsers.add_parser("hooks", help="local push trigger (post-receive hook)")
    sub = group.add_subparsers(dest="hooks_command", metavar="ACTION", required=True)
    init = sub.add_parser("init-bare", help="create a bare model repo with the hook installed")
    _common(init)
    init.set_defaults(func=_init)
    install = sub.add_parser("install", help="install the hook into an existing bare repo")
    _common(install)
    install.set_defaults(func=_install)
