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
import textwrap
from typing import Generator, Sequence

import mlops.commands
from contracts.errors import report
from mlops.commands._options import environment_defaults

#: `mlops --help` lists the commands by what a person does with them, in this order.
GROUPS: dict[str, tuple[str, ...]] = {
    "set up": ("up", "down", "gitops", "hooks", "images", "schema", "data", "gate"),
    "run the loop": ("run", "workflows", "step", "promote", "pr", "controller"),
    "inspect": ("status", "runs", "ui", "demo"),
    "operate": ("canary", "rollback", "serve", "load"),
}


class _GroupedHelp(argparse.RawDescriptionHelpFormatter):
    """The top level's help: the usage as argparse writes it, the commands in groups
    (the epilog, `grouped`) instead of argparse's one flat list."""

    def _iter_indented_subactions(self, action: argparse.Action,
                                  ) -> Generator[argparse.Action, None, None]:
        if not isinstance(action, argparse._SubParsersAction):
            yield from super()._iter_indented_subactions(action)


def grouped(subparsers: argparse._SubParsersAction) -> str:
    """The commands' one-line helps under their group's title (`GROUPS`)."""
    helps = {a.dest: (a.help or "").replace("%%", "%") for a in subparsers._choices_actions}
    width = max(map(len, helps)) + 4
    listed = {name for names in GROUPS.values() for name in names}
    groups = {**GROUPS, "other": tuple(sorted(set(helps) - listed))}  # empty unless one is new
    out = []
    for title, names in groups.items():
        if not any(name in helps for name in names):
            continue
        out.append(f"{title}:")
        out += [textwrap.fill(helps[name], 79, initial_indent=f"  {name:<{width - 2}}",
                              subsequent_indent=" " * width)
                for name in names if name in helps]
        out.append("")
    return "\n".join(out).rstrip()


def build_parser() -> argparse.ArgumentParser:
    """Build the parser with every command group found in `mlops.commands`."""
    parser = argparse.ArgumentParser(
        prog="mlops",
        description="GitOps MLOps pipeline with model promotion and canary serving.",
        formatter_class=_GroupedHelp,
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(mlops.commands.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):  # shared options, not a command
            continue
        module = importlib.import_module(f"mlops.commands.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(subparsers)
    parser.epilog = grouped(subparsers)
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
