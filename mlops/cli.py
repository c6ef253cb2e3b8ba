"""The `mlops` command line: one entry, command groups registered per room.

Each module in `mlops/commands/` exposes `register(subparsers)` and adds its
own sub-commands, setting `func` on its parser (argparse's `set_defaults`).
Keeping one module per group lets the rooms grow their commands without
editing a shared file.

Errors meant for the user (bad config, missing binary, refused promotion)
derive from `contracts.errors.MlopsError`: the CLI prints `error: <message>`
on stderr and exits with its `ExitCode` (the exit-code table of docs/reference/cli.md,
generated from it), never a traceback.
"""

import argparse
import importlib
import pkgutil
import sys
from typing import Sequence

import mlops.commands
from contracts.errors import report
from mlops.commands._options import environment_defaults


def build_parser() -> argparse.ArgumentParser:
    """Build the parser with every command group found in `mlops.commands`."""
    parser = argparse.ArgumentParser(
        prog="mlops",
        description="GitOps MLOps pipeline with model promotion and canary serving.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(mlops.commands.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"mlops.commands.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    environment_defaults(args)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        result = func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # errors meant for a person: one line and their exit code
        code = report(exc)
        if code is None:
            raise
        return code
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
