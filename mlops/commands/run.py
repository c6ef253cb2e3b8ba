"""`mlops run PATH`: run a push of the model repo locally (the same two Workflows as Argo)."""

import argparse
import pathlib
from typing import Any

from mlops.commands._options import ENVIRONMENT, from_env
from mlops.errors import UserError


def _run(args: argparse.Namespace) -> int:
    """The cluster's two stages on this machine: the push Workflow (`workflows.push`) checks
    out the commit and its submit step renders that commit's pipeline; then that very
    Workflow runs here, where the cluster's step would create it through the API."""
    from local.argo.runner import run_workflow
    from mlops.images.stepbuild import step_builder
    from workflows.binding import binding_for
    from workflows.config import load_config
    from workflows.pipeline import PARAMETERS
    from workflows.push import PUSH_PARAMETERS, build_push_template
    from workflows.settings import load_settings

    loaded = load_config(args.path)
    settings = load_settings(args.settings)
    # build-image: the model repo's Dockerfile built with podman, from what the cluster's step
    # gives BuildKit (mlops.images.stepbuild); the environment digest without podman
    builder = step_builder(args.image_build or "auto")
    params = {}
    for item in args.param or []:
        name, sep, value = item.partition("=")
        if not sep or name not in PARAMETERS:
            raise UserError(
                f"--param {item!r}: expected NAME=VALUE with NAME one of {', '.join(PARAMETERS)}"
            )
        params[name] = value
    # What the platform binds this repo to (`workflows.binding`): `--model` and a given
    # `gitops-repo` (the hook passes both from the bare repo's config), else this
    # commit's own values -- you run your own repo. The push's submit step refuses a
    # commit that names others, as in the cluster.
    binding = binding_for(loaded, model=args.model, gitops_repo=params.get("gitops-repo"))
    out = pathlib.Path(args.out) if args.out else pathlib.Path("mlops-out") / binding.model
    submitted: list[dict[str, Any]] = []
    pushed = run_workflow(
        build_push_template(loaded, settings, binding), loaded.repo_dir, out / "push",
        parameters={k: v for k, v in params.items() if k in PUSH_PARAMETERS},
        submit=submitted.append,
    )
    if pushed.status != "Succeeded" or not submitted:
        return 1
    result = run_workflow(
        submitted[0], loaded.repo_dir, out,
        parameters={k: v for k, v in params.items() if k not in PUSH_PARAMETERS},
        image_builder=builder,
    )
    return 0 if result.status == "Succeeded" else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops run`."""
    parser = subparsers.add_parser(
        "run", help="run a push locally: the push Workflow renders this commit's pipeline, "
        "then it runs (the same two Workflows Argo runs)"
    )
    parser.add_argument("path", help="model repo (directory with mlops.yaml)")
    parser.add_argument("--out", help="run directory (default: ./mlops-out/<model>)")
    parser.add_argument("--settings", help="platform settings YAML (same file as for render)")
    parser.add_argument("--model", help="the model this repo is bound to (a commit whose "
                        "mlops.yaml names another is refused; default: its own)")
    parser.add_argument(
        "--param",
        action="append",
        metavar="NAME=VALUE",
        help="workflow parameter (repo, revision, ref, gitops-repo)",
    )
    parser.add_argument(
        "--image-build", choices=("auto", "podman", "record"),
        help="build-image: build the repo's Dockerfile with podman as the cluster's step "
        "builds it (podman; auto: when podman is installed, the default) or record the "
        f"environment instead (record); default ${ENVIRONMENT['image_build']} or auto")
    from_env(parser, "image_build")
    parser.set_defaults(func=_run)
