"""What every step entrypoint shares: arguments, output parameters, lineage env.

A step is a typed function (`run(...)`) that the local runner calls and a
`main(argv)` that a container calls; both write Argo output parameters as
one file per parameter under `--outputs` (Argo reads them with
`valueFrom.path`), so the same code serves both runtimes.
"""

import argparse
import json
import os
import pathlib
from typing import Any, Callable, Sequence

from cogs.files import atomic_write_text
from contracts.errors import report


def base_parser(description: str) -> argparse.ArgumentParser:
    """Arguments common to every step."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repo", default=".", help="model repo directory (holds mlops.yaml)")
    parser.add_argument("--out", default="mlops-out", help="this run's working directory")
    parser.add_argument(
        "--outputs", default=None, help="directory for output parameters (default: OUT/outputs)"
    )
    return parser


def outputs_dir(args: argparse.Namespace) -> pathlib.Path:
    """Where this step writes its output parameters."""
    return pathlib.Path(args.outputs) if args.outputs else pathlib.Path(args.out) / "outputs"


def write_outputs(directory: pathlib.Path, params: dict[str, Any]) -> None:
    """Write each output parameter to its own file (atomically)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, value in params.items():
        text = value if isinstance(value, str) else json.dumps(value)
        atomic_write_text(directory / name, text)


def lineage_env() -> dict[str, str]:
    """Lineage that training records into model.yaml, passed through the environment."""
    keys = ("MLOPS_TRAINING_COMMIT", "MLOPS_WORKFLOW_ID", "MLOPS_METRICS_PORT")
    return {k: os.environ[k] for k in keys if k in os.environ}


def run_main(
    func: Callable[[argparse.Namespace], dict[str, Any]],
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
) -> int:
    """Parse, run, write outputs; user errors become one line and exit code."""
    args = parser.parse_args(argv)
    try:
        params = func(args)
    except Exception as exc:
        code = report(exc)  # the same one line on stderr as the CLI's
        if code is None:
            raise
        return code
    write_outputs(outputs_dir(args), params)
    return 0
