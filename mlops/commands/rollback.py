"""`mlops rollback MODEL [--to VERSION]`: an earlier version stable at 100 %, no analysis.

Commits on the GitOps repo's main branch through `promotion.gitrepo.rollback`; `--to`
defaults to the previous stable version, whose model files must still be published
(where its Deployment's `file://` model-uri points, or under `--models-root`). With a
runtime to ask (`--readiness local|kubernetes`), a version that is not running comes
back first at 0 % and takes the traffic once ready, within `--wait` seconds; not ready
in time is exit 1 with the reason. `--readiness none` moves the traffic at once.
Why: docs/make-before-break.md.
"""

from __future__ import annotations

import argparse
import pathlib

from mlops.commands._options import from_env, gitops_option, require_gitops


def _rollback(args: argparse.Namespace) -> int:
    from gitops.people import current_user
    from mlops.commands.controller import readiness_from_args
    from promotion.gitrepo.rollback import DEFAULT_WAIT
    from promotion.gitrepo.steering import rollback_to

    require_gitops(args)
    runtime, readiness = readiness_from_args(args)
    elsewhere = _other_platform(args) if args.readiness is None else None
    if elsewhere:  # $MLOPS_WORKDIR names a platform that serves another repo
        print(f"note: {elsewhere}", flush=True)
        readiness = None
    if readiness is None:
        print("note: readiness not checked: the version rolled back to takes the traffic "
              "in the commit that brings it back, before it is ready; pass --readiness "
              "local|kubernetes to bring it up first", flush=True)
    else:
        print(f"readiness: {runtime}", flush=True)
    lines = rollback_to(
        args.gitops, args.model, current_user(args.by), to=args.to, branch=args.branch,
        workdir=pathlib.Path(args.workdir) if args.workdir else None,
        models_root=pathlib.Path(args.models_root) if args.models_root else None,
        readiness=readiness, wait=DEFAULT_WAIT if args.wait is None else args.wait,
        progress=lambda line: print(line, flush=True))
    print("\n".join(lines))
    return 0


def _other_platform(args: argparse.Namespace) -> str | None:
    """Why the local platform found by default does not serve `--gitops` (None: it does).

    Asked only when `--readiness` was not given: a work dir in the environment that
    syncs another GitOps repo would never report the version ready."""
    workdir = args.platform_workdir
    if not workdir:
        return None
    from local.platform.workdir import Workdir, load_config

    config = load_config(Workdir(pathlib.Path(workdir)))
    if config is None:
        return f"no local platform in {workdir}; readiness not asked there"

    def key(repo: str) -> str:
        local = "://" not in repo and not repo.startswith("git@")
        return str(pathlib.Path(repo).expanduser().resolve()) if local else repo.rstrip("/")

    if key(config.gitops) != key(args.gitops):
        return (f"the local platform in {workdir} syncs {config.gitops}, not {args.gitops}; "
                "readiness not asked there")
    return None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds cannot be negative")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops rollback`."""
    p = subparsers.add_parser(
        "rollback", help="make an earlier version stable at 100%% (no analysis; brought up "
                         "before it takes traffic)")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--to", metavar="VERSION",
                   help="the version to serve (default: the previous stable version)")
    gitops_option(p)
    p.add_argument("--branch", default="main")
    p.add_argument("--by", help="who asks (default: the current user)")
    p.add_argument("--workdir", help="reuse clones here (default: a temporary dir)")
    p.add_argument("--models-root",
                   help="the models volume, to check that <root>/MODEL/VERSION is still "
                        "published (default: $MLOPS_MODELS, else the Deployment's file:// "
                        "model-uri)")
    p.add_argument("--readiness", choices=["kubernetes", "local", "none"], default=None,
                   help="who says the version is ready before it gets the traffic: the "
                        "Kubernetes API (your kubeconfig), the local platform's status, or "
                        "nobody (one commit; default: local when a platform work dir is "
                        "known, else none)")
    p.add_argument("--readiness-namespace", default="models",
                   help="namespace of the serving Deployments (--readiness kubernetes)")
    p.add_argument("--platform-workdir",
                   help="the local platform's work dir (--readiness local; "
                        "default: $MLOPS_WORKDIR)")
    p.add_argument("--wait", type=_seconds, default=None, metavar="SECONDS",
                   help="how long the version may take to be ready before the rollback stops "
                        "with the traffic where it was (default: "
                        "promotion.gitrepo.rollback.DEFAULT_WAIT, 300)")
    from_env(p, "models_root", "platform_workdir")
    p.set_defaults(func=_rollback)
