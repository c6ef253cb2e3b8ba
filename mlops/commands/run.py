"""`mlops run PATH`: run the model repo's pipeline locally (the same Hera DAG)."""

import argparse
import pathlib

from mlops.errors import UserError
from workflows.config import load_config
from workflows.settings import load_settings


def _run(args: argparse.Namespace) -> int:
    # Imported here: Hera's models take seconds to import, and every other
    # `mlops` command should not pay for them.
    from local.argo.runner import run_workflow, workflow_parameters

    # lazy (import cost): `mlops --help` does not load it; it pulls hera
    from workflows.pipeline import build_workflow_template

    loaded = load_config(args.path)
    settings = load_settings(args.settings)
    wt = build_workflow_template(loaded, settings)
    known = list(workflow_parameters(wt.to_dict()))
    params = {}
    for item in args.param or []:
        name, sep, value = item.partition("=")
        if not sep or name not in known:
            raise UserError(
                f"--param {item!r}: expected NAME=VALUE with NAME one of {', '.join(known)}"
            )
        params[name] = value
    out = pathlib.Path(args.out) if args.out else pathlib.Path("mlops-out") / loaded.config.model
    result = run_workflow(
        wt, loaded.repo_dir, out, parameters=params
    )
    return 0 if result.status == "Succeeded" else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops run`."""
    parser = subparsers.add_parser(
        "run", help="run the pipeline locally: the same DAG Argo runs, on this machine"
    )
    parser.add_argument("path", help="model repo (directory with mlops.yaml)")
    parser.add_argument("--out", help="run directory (default: ./mlops-out/<model>)")
    parser.add_argument("--settings", help="platform settings YAML (same file as for render)")
    parser.add_argument(
        "--param",
        action="append",
        metavar="NAME=VALUE",
        help="workflow parameter (repo, revision, ref, gitops-repo)",
    )
    parser.set_defaults(func=_run)
