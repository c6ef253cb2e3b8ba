"""`mlops step NAME ...`: run one pipeline step, as a container would."""

import argparse
import importlib

from workflows.steps import STEPS


def _run(args: argparse.Namespace) -> int:
    module = importlib.import_module(STEPS[args.step])
    return int(module.main(args.step_args))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops step`."""
    parser = subparsers.add_parser(
        "step", help="run one pipeline step (smoke-train, train, evaluate, gate, ...)"
    )
    parser.add_argument("step", choices=sorted(STEPS))
    parser.add_argument("step_args", nargs=argparse.REMAINDER, help="the step's own arguments")
    parser.set_defaults(func=_run)
