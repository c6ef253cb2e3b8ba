"""The CLI reference page, generated from the argparse parsers `mlops` itself runs.

Every command (`mlops.cli.build_parser`, walked through its sub-parsers) gets a section
with its usage line and one row per argument: its flags or name, its default and its
help. `mlops step NAME` passes its arguments on to the step's own parser
(`workflows.steps.<module>.build_parser`), so each step gets a section of its own too.
The exit codes close the page, from `contracts.errors.ExitCode` and its comments.
A flag cannot be missing: the page is made from the parsers at each docs build.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import io
import pathlib
import re
import tokenize
from typing import Iterator

__all__ = ["commands", "exit_codes_markdown", "markdown", "section_id", "step_parsers"]

_WIDTH = 88


def section_id(path: tuple[str, ...]) -> str:
    """The anchor of a command's section: `mlops-data-snapshot`."""
    return "-".join(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") for p in path)


def _subcommands(parser: argparse.ArgumentParser,
                 ) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each sub-command, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            # argparse %-formats a help text when it prints it ("100%%" reads "100%")
            helps = {a.dest: (a.help or "").replace("%%", "%") for a in action._choices_actions}
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:  # an alias of one already listed
                    continue
                seen.add(id(sub))
                yield name, helps.get(name, ""), sub


def step_parsers() -> dict[str, argparse.ArgumentParser]:
    """{step name: its own parser} for `mlops step NAME ...`."""
    from workflows.steps import STEPS

    out = {}
    for name, module in sorted(STEPS.items()):
        parser = importlib.import_module(module).build_parser()
        parser.prog = f"mlops step {name}"
        out[name] = parser
    return out


def commands(parser: argparse.ArgumentParser | None = None,
             ) -> list[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    """Every command as (path, help, parser), depth first; `mlops step`'s steps included."""
    if parser is None:
        from mlops.cli import build_parser

        parser = build_parser()
    found: list[tuple[tuple[str, ...], str, argparse.ArgumentParser]] = []

    def walk(path: tuple[str, ...], help_: str, p: argparse.ArgumentParser) -> None:
        found.append((path, help_, p))
        for name, sub_help, sub in _subcommands(p):
            walk((*path, name), sub_help, sub)
        if path == ("mlops", "step"):
            for name, sub in step_parsers().items():
                found.append(((*path, name), (sub.description or "").strip(), sub))

    walk(("mlops",), parser.description or "", parser)
    return found


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell (HTML-ish `<model>`, pipes, stars)."""
    text = " ".join(text.split())
    out = []
    for i, part in enumerate(re.split(r"(`[^`]*`)", text)):
        if i % 2:  # a code span: as written, but a pipe still ends the cell
            out.append(part.replace("|", "\\|"))
        else:
            out.append(part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                       .replace("|", "\\|").replace("*", "\\*"))
    return "".join(out)


def _home(text: str) -> str:
    return text.replace(str(pathlib.Path.home()), "~")


def _argument(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    if action.nargs == 0:
        return ", ".join(f"`{o}`" for o in action.option_strings)
    if action.metavar is not None:
        metavar = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    elif action.choices is not None:
        metavar = "{" + ",".join(str(c) for c in action.choices) + "}"
    else:
        metavar = action.dest.upper()
    return ", ".join(f"`{o} {metavar}`" for o in action.option_strings)


def _default(action: argparse.Action) -> str:
    if action.required:
        return "**required**" if action.option_strings else ""
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS, [], ""):
        return ""
    return f"`{_home(str(action.default))}`"


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%" in text:
        formatter = argparse.HelpFormatter(prog)
        text = formatter._expand_help(action)
    bits = [_home(text)]
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        if action.metavar is not None:  # the usage line does not show them
            bits.append(f"(one of: {', '.join(str(c) for c in action.choices)})")
    if isinstance(action, argparse._AppendAction):
        bits.append("(repeatable)")
    return " ".join(b for b in bits if b)


def documented(action: argparse.Action) -> bool:
    """Whether an action gets a row (not `-h`, not a hidden one, not the sub-command slot)."""
    return not (isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
                or action.help == argparse.SUPPRESS)


def _section(path: tuple[str, ...], help_: str, parser: argparse.ArgumentParser) -> str:
    level = "##" if len(path) <= 2 else "###"
    out = [f"{level} `{' '.join(path)}` {{#{section_id(path)}}}", ""]
    description = (parser.description or "").strip()
    for text in dict.fromkeys(t for t in (help_.strip(), description) if t):
        out += [_cell(text[0].upper() + text[1:]), ""]
    out += ["```text", _usage(parser), "```", ""]
    subs = list(_subcommands(parser))
    if path == ("mlops", "step"):
        subs = [(name, (p.description or "").strip(), p) for name, p in step_parsers().items()]
    if subs:
        out += ["| command | what it does |", "|---|---|"]
        out += [f"| [`{name}`](#{section_id((*path, name))}) | {_cell(h)} |" for name, h, _ in subs]
        out.append("")
    rows = [a for a in parser._actions if documented(a)]
    if rows:
        out += ["| argument | default | meaning |", "|---|---|---|"]
        out += [f"| {_argument(a)} | {_default(a)} | {_cell(_help(a, parser.prog))} |"
                for a in rows]
        out.append("")
    return "\n".join(out)


def exit_codes_markdown() -> str:
    """The exit-code table, from `contracts.errors.ExitCode` and each member's `#:` comment."""
    from contracts import errors
    from contracts.errors import ExitCode

    source = inspect.getsource(errors)
    meaning: dict[str, str] = {}
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and tok.string.startswith("#:"):
            match = re.match(r"\s*([A-Z_]+)\s*=", lines[tok.start[0] - 1])
            if match:
                meaning[match.group(1)] = tok.string[2:].strip()
    out = ["| code | meaning |", "|---:|---|", "| 0 | done |"]
    for code in ExitCode:
        words = code.name.lower().replace("_", " ")
        out.append(f"| {int(code)} | {words}: {_cell(meaning.get(code.name, ''))} |")
    return "\n".join(out) + "\n"


def markdown() -> str:
    """The whole CLI reference page."""
    found = commands()
    out = ["# CLI reference", "",
           "Generated from the parsers `mlops` runs (`mlops/commands/`, and each pipeline "
           "step's own for `mlops step`) each time the site is built: every command and "
           "every flag is here. `mlops COMMAND --help` prints the same.", "",
           "| command | what it does |", "|---|---|"]
    out += [f"| [`{' '.join(path)}`](#{section_id(path)}) | {_cell(help_)} |"
            for path, help_, _ in found[1:] if len(path) == 2]
    out.append("")
    out += [_section(path, help_, parser) for path, help_, parser in found]
    out += ["## Exit codes {#exit-codes}", "",
            "Every command exits with one of these (`contracts/errors.py`). An error prints "
            "one `error: ...` line on stderr, never a traceback.", "",
            exit_codes_markdown()]
    return "\n".join(out)
