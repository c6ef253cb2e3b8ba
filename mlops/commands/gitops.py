"""`mlops gitops ...`: create and inspect the GitOps repository.

* ``mlops gitops init DIR|URL`` -- a new/empty DIR becomes a bare repo with the
  layout (README, ``mlops-gitops.yaml``, ``apps/``, ``argocd/``) on ``main``;
  a URL must name an existing repo, the layout is pushed to it. Idempotent.
* ``mlops gitops show [MODEL] [--gitops R] [--ref main]`` -- models, live
  versions, weights and weights digests as committed.
* ``mlops gitops lint [--gitops R] [--ref main] [--scrape-interval 30s]`` -- every
  Kubernetes/Istio/Argo CD file against its official schema, then the
  cross-file rules (`promotion.gitrepo.lint`); exit 1 with one line per problem.

The repo defaults to ``$MLOPS_GITOPS_REPO``.
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile

from mlops.commands._options import gitops_option, require_gitops
from mlops.errors import UserError


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

    repo = require_gitops(args)
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


def _lint(args: argparse.Namespace) -> int:
    from gitops import layout
    from gitops.repo import Mirror
    from promotion.decision.policy import parse_duration
    from promotion.gitrepo.lint import lint_tree
    from workflows.lint import lint_paths

    repo = require_gitops(args)
    try:
        scrape = parse_duration(args.scrape_interval)
    except ValueError as exc:
        raise UserError(f"--scrape-interval: {exc}") from None
    with Mirror(repo) as mirror, tempfile.TemporaryDirectory(prefix="mlops-lint-") as tmp:
        root = pathlib.Path(tmp)
        sha = mirror.export(args.ref, root)
        # Only what Argo CD applies has a schema; the kustomization and our own files
        # (promotion.yaml, canary-policy.yaml) are checked by the cross-file rules.
        skip = {layout.KUSTOMIZATION, layout.PROMOTION, "canary-policy.yaml"}
        files = [p for p in sorted(root.glob(f"{layout.APPS}/*/*.yaml")) if p.name not in skip]
        files += sorted(root.glob(f"{layout.ARGOCD}/*.yaml"))
        count, problems = lint_paths(files)
        problems = [p.replace(f"{root}/", "") for p in problems]
        problems += lint_tree(root, scrape_interval=scrape)
    for problem in problems:
        print(problem)
    verdict = f"{len(problems)} problem(s)" if problems else "valid"
    print(f"{repo} @ {args.ref} ({sha[:12]}): {count} document(s) in {len(files)} file(s): "
          f"{verdict}")
    return 1 if problems else 0


def register(subparsers: argparse._SubParsersAction) -> None:
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
    gitops_option(show)
    show.add_argument("--ref", default="main", help="branch or commit (default: main)")
    show.set_defaults(func=_show)

    lint = sub.add_parser("lint", help="check the repo's files and the rules between them")
    gitops_option(lint)
    lint.add_argument("--ref", default="main", help="branch or commit (default: main)")
    lint.add_argument("--scrape-interval", default="30s",
                      help="Prometheus scrape interval of the models (default 30s, kube-prometheus-"
                           "stack's; Prometheus' own default is 1m)")
    lint.set_defaults(func=_lint)
