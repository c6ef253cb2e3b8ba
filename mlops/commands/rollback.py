"""`mlops rollback MODEL [--to VERSION]`: an earlier version stable at 100 %, at once.

One commit on the GitOps repo's main branch (`promotion.gitrepo.rollback`): the
earlier version's Deployment comes back from the repo's history, traffic
goes to it alone, the version rolled back from (and a canary in flight) is
removed, and the commit says that a human asked and that no analysis was
done (`Mlops-Decision: rollback/human`, `Mlops-Requested-By:`). `--to`
defaults to the previous stable version. Its model files must still be
published: where the Deployment's `file://` model-uri points, or under
`--models-root` (default `$MLOPS_MODELS`, the pipeline's models volume).
"""

from __future__ import annotations

import argparse
import os
import pathlib


def _rollback(args: argparse.Namespace) -> int:
    # lazy (import cost): `mlops --help` does not load it
    from gitops.people import current_user
    from promotion.gitrepo.steering import rollback_to

    lines = rollback_to(
        args.gitops, args.model, current_user(args.by), to=args.to, branch=args.branch,
        workdir=pathlib.Path(args.workdir) if args.workdir else None,
        models_root=pathlib.Path(args.models_root) if args.models_root else None)
    print("\n".join(lines))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops rollback`."""
    p = subparsers.add_parser(
        "rollback", help="make an earlier version stable at 100%% at once (one commit)")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--to", metavar="VERSION",
                   help="the version to serve (default: the previous stable version)")
    p.add_argument("--gitops", default=os.environ.get("MLOPS_GITOPS_REPO"),
                   required=not os.environ.get("MLOPS_GITOPS_REPO"),
                   help="GitOps repository (path or URL; default: $MLOPS_GITOPS_REPO)")
    p.add_argument("--branch", default="main")
    p.add_argument("--by", help="who asks (default: the current user)")
    p.add_argument("--workdir", help="reuse clones here (default: a temporary dir)")
    p.add_argument("--models-root", default=os.environ.get("MLOPS_MODELS"),
                   help="the models volume, to check that <root>/MODEL/VERSION is still "
                        "published (default: $MLOPS_MODELS, else the Deployment's file:// "
                        "model-uri)")
    p.set_defaults(func=_rollback)
