"""`mlops gitops ...`: create and inspect the GitOps repository.

* ``mlops gitops init DIR|URL`` -- a new/empty DIR becomes a bare repo with the
  layout (README, ``mlops-gitops.yaml``, ``apps/``, ``argocd/``) on ``main``;
  a URL must name an existing repo, the layout is pushed to it. Idempotent.
* ``mlops gitops show [MODEL] [--repo R] [--ref main]`` -- models, live
  versions, weights and weights digests as committed.

The repo defaults to ``$MLOPS_GITOPS_REPO``.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import tempfile

from mlops.errors import UserError


def repo_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--repo`` (default ``$MLOPS_GITOPS_REPO``) to a parser."""
    parser.add_argument(
        "--repo",
        default=os.environ.get("MLOPS_GITOPS_REPO"),
        help="GitOps repo: path of the bare repo or its URL (default: $MLOPS_GITOPS_REPO)",
    )


def require_repo(args: argparse.Namespace) -> str:
    if not args.repo:
        raise UserError("no GitOps repo given: pass --repo PATH_OR_URL or set MLOPS_GITOPS_REPO")
    return str(args.repo)


def _init(args: argparse.Namespace) -> int:
    from gitops.repo import init_repo

    result = init_repo(args.target, repo_url=args.argocd_repo_url, namespace=args.namespace)
    what = "initialised" if result.status == "committed" else "already initialised"
    print(f"{what}: {args.target} (main at {str(result.commit)[:12]})")
    return 0


def _show(args: argparse.Namespace) -> int:
    from gitops import layout
    from gitops.repo import Mirror
    from serving.manifests import ANNOTATION_WEIGHTS_SHA256

    repo = require_repo(args)
    with Mirror(repo) as mirror, tempfile.TemporaryDirectory(prefix="mlops-show-") as tmp:
        sha = mirror.export(args.ref, pathlib.Path(tmp))
        models = layout.list_models(pathlib.Path(tmp))
        if args.model:
            if args.model not in models:
                raise UserError(
                    f"model {args.model!r} is not in {repo} at {args.ref}; "
                    f"models: {', '.join(models) or 'none'}"
                )
            models = [args.model]
        print(f"{repo} @ {args.ref} ({sha[:12]})")
        for model in models:
            state = layout.read_model(pathlib.Path(tmp), model)
            weights = state.weights()
            print(f"{model}:")
            for version, dep in sorted(state.deployments.items()):
                digest = (dep["metadata"].get("annotations") or {}).get(
                    ANNOTATION_WEIGHTS_SHA256, "?"
                )
                print(
                    f"  {version:<20} weight {weights.get(version, 0):>3}%  "
                    f"replicas {dep['spec'].get('replicas', 1)}  sha256 {digest[:12]}"
                )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("gitops", help="create and inspect the GitOps repository")
    sub = parser.add_subparsers(dest="gitops_command", metavar="ACTION", required=True)

    init = sub.add_parser("init", help="create the GitOps repo layout at DIR or URL")
    init.add_argument("target", metavar="DIR|URL")
    init.add_argument(
        "--argocd-repo-url", default=None, help="repoURL Argo CD should clone (default: the target)"
    )
    init.add_argument("--namespace", default="models", help="namespace the models run in")
    init.set_defaults(func=_init)

    show = sub.add_parser("show", help="models, versions, weights as committed")
    show.add_argument("model", nargs="?")
    repo_argument(show)
    show.add_argument("--ref", default="main", help="branch or commit (default: main)")
    show.set_defaults(func=_show)
