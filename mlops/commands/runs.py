"""`mlops runs compare A B [C ...]`: pipeline runs side by side.

Each run is a path (a run's `--out` dir, or a post-receive hook's run dir) or a
name under `--runs DIR` (a pushed commit's prefix, as `mlops status --runs`
shows it). Rows: the run, its parameters (the pipeline's and the model's
hyperparameters), dataset digest and pins, metrics, the gate's verdict, each
step's seconds and the final training loss; rows whose values differ start with
`*` (`--differences`: only those). `--json`: the whole comparison with the loss
curves, as the UI's Compare view reads it (`workflows.run_compare`).
"""

from __future__ import annotations

import argparse
import json
import pathlib

from mlops.errors import UserError


def _compare(args: argparse.Namespace) -> int:
    from workflows.run_compare import compare, find_run, read_run, render_table

    if len(args.run) < 2:
        raise UserError("mlops runs compare: name two or more runs (paths, or names under "
                        "--runs DIR)")
    roots = [pathlib.Path(r).expanduser() for r in args.runs]
    records = [read_run(find_run(name, roots)) for name in args.run]
    comparison = compare(records)
    if args.json:
        print(json.dumps(comparison, indent=2, default=str))
    else:
        print(render_table(comparison, all_rows=not args.differences))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops runs compare`."""
    parser = subparsers.add_parser("runs", help="pipeline runs: compare them side by side")
    sub = parser.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    p = sub.add_parser("compare", help="parameters, data, metrics, gate, durations and loss of "
                                       "two or more runs; differences marked with *")
    p.add_argument("run", nargs="+", metavar="RUN",
                   help="a run's output dir, or its name under --runs")
    p.add_argument("--runs", action="append", default=[], metavar="DIR",
                   help="a runs dir of the post-receive hook (repeatable)")
    p.add_argument("--differences", action="store_true", help="only the rows that differ")
    p.add_argument("--json", action="store_true", help="the comparison as JSON")
    p.set_defaults(func=_compare)
