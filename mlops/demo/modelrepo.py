"""The demo's edits of the model repo: copy the example in, set the full job's args.

`set_full_args` edits `mlops.yaml` as text, so the comments a user reads stay
and `git diff` shows one line; the result is parsed back and checked against
the intended config, so an example laid out differently fails loudly instead
of being half-edited.
"""

import pathlib
import shutil
from typing import Any

import yaml

from contracts.errors import ExitCode
from mlops.demo.scenarios import with_args
from mlops.errors import UserError

IGNORED = ("data", "__pycache__", "*.pyc", ".git", "runs", "out")


class ModelRepoEditError(UserError):
    """`mlops.yaml` is not laid out as the demo expects."""

    exit_code = ExitCode.BAD_INPUT


def copy_example(example: pathlib.Path, clone: pathlib.Path) -> None:
    """Copy the example's files (not its generated data) into the clone."""
    shutil.copytree(example, clone, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*IGNORED))


def _flow(args: dict[str, Any]) -> str:
    # width: PyYAML folds long flow mappings at 80 columns (a deep work dir in a path)
    return yaml.safe_dump(dict(args), default_flow_style=True, sort_keys=False,
                          width=2**31 - 1).strip()


def full_args_text(text: str, args: dict[str, Any], where: str = "mlops.yaml") -> str:
    """`text` with `training.full.overrides.args` set to `args` (pure)."""
    lines = text.splitlines()
    out: list[str] = []
    section = None  # the top-level key we are in
    in_full = in_overrides = done = False
    overrides_indent = full_indent = 0
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if stripped and not stripped.startswith("#"):
            if indent == 0:
                section = stripped.split(":")[0]
                in_full = in_overrides = False
            elif section == "training" and stripped.startswith("full:"):
                in_full, full_indent = True, indent
            elif in_full and indent <= full_indent:
                in_full = in_overrides = False
            elif in_full and stripped.startswith("overrides:"):
                in_overrides, overrides_indent = True, indent
                out.append(line)
                if args:
                    out.append(" " * (indent + 2) + "args: " + _flow(args))
                done = True
                continue
            elif in_overrides and indent <= overrides_indent:
                in_overrides = False
            elif in_overrides and indent == overrides_indent + 2 and stripped.startswith("args:"):
                continue  # the previous push's args line: replaced above
        out.append(line)
    if not done:
        raise ModelRepoEditError(f"{where}: no training.full.overrides section to put args in")
    result = "\n".join(out) + "\n"
    expected = with_args(yaml.safe_load(text) or {}, args)
    try:
        same = yaml.safe_load(result) == expected
    except yaml.YAMLError:
        same = False
    if not same:
        raise ModelRepoEditError(
            f"{where}: could not set training.full.overrides.args as one line "
            "(is `args:` written as a block?); edit it by hand")
    return result


def data_lock(config: pathlib.Path) -> str:
    """The lock file `mlops.yaml`'s `data.train` names, where the demo pins each week."""
    data = (yaml.safe_load(config.read_text()) or {}).get("data") or {}
    lock = data.get("train") if isinstance(data, dict) else None
    if not isinstance(lock, str) or not lock:
        raise ModelRepoEditError(f"{config}: no data.train lock file to pin the week's data in")
    return lock


def set_full_args(path: pathlib.Path, args: dict[str, Any]) -> None:
    """Set the full job's args in the model repo's `mlops.yaml`."""
    path.write_text(full_args_text(path.read_text(), args, str(path)))
