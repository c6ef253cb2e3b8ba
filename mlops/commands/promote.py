"""`mlops promote propose MODEL_DIR --gitops REPO`: propose a trained model for serving.

The same step the pipeline runs (`mlops step propose`, `workflows.steps.propose`):
one parser, one code path, whether a person or the WorkflowTemplate calls it.
"""

import argparse

from workflows.steps.propose import add_arguments, run_args


def _propose(args: argparse.Namespace) -> int:
    return run_args(args)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops promote propose`."""

    parser = subparsers.add_parser("promote", help="propose a trained model for serving")
    sub = parser.add_subparsers(dest="promote_command", metavar="ACTION", required=True)
    p = sub.add_parser("propose", help="write the candidate's manifests on a branch and open a PR")
    add_arguments(p)
    p.set_defaults(func=_propose)
