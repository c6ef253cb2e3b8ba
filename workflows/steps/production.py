"""`find-production`: where the model in production keeps its export, for a warm start.

`training.init_from: production` in `mlops.yaml` makes the full training
start from production's weights (the training command gets `--init-from
DIR`). This step reads the stable version from the GitOps repo
(`promotion.gitrepo.production`, as the gate does) and outputs `model-dir`: its
export on the models volume, or empty when there is nothing to start from
(no GitOps repo configured, nothing in production yet, or an export this
run cannot read), in which case the training starts from scratch and the
log says why. A GitOps repo that cannot be read fails the step.
"""

import argparse
from typing import Any, Sequence

from promotion.gitrepo.production import read_production
from workflows.config import load_config
from workflows.steps.common import base_parser, run_main


def run(repo: str, gitops: str, branch: str = "main") -> dict[str, Any]:
    """Output `model-dir` (empty: train from scratch) and `version`."""
    model = load_config(repo).config.model
    found = read_production(gitops, model, branch or "main") if gitops else None
    if found is None:
        print(f"init from: no production version of {model}"
              f"{'' if gitops else ' (no GitOps repo configured)'}; training from scratch",
              flush=True)
        return {"model-dir": "", "version": ""}
    export = found.model_dir
    if export is None or not (export / "inference.pdiparams").is_file():
        print(f"init from: production {found.version}'s export is not readable here "
              f"({export or 'no file:// model-uri'}); training from scratch", flush=True)
        return {"model-dir": "", "version": found.version}
    print(f"init from: production {model} {found.version} ({export})", flush=True)
    return {"model-dir": str(export), "version": found.version}


def build_parser() -> argparse.ArgumentParser:
    """This step's arguments; tests parse every rendered template's argv with it."""
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--production-from-gitops", metavar="REPO", default="",
                        help="GitOps repo (path or URL) whose stable version is production")
    parser.add_argument("--gitops-branch", default="main", help="branch of the GitOps repo")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Container / CLI entry."""
    parser = build_parser()
    return run_main(lambda a: run(a.repo, a.production_from_gitops, a.gitops_branch),
                    parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
