"""`smoke-train`: one worker, a few iterations on a data subset.

It exists to fail fast: a broken model repo (import error, wrong output
layout, a crash in the first steps) is caught in seconds, before the full
job books its workers. It always starts from scratch.
"""

import argparse
from typing import Any, Sequence

from workflows.config import load_config
from workflows.steps.common import base_parser, run_main
from workflows.steps.training_job import run_job

SMOKE_TIMEOUT_S = 15 * 60


def run(repo: str, out: str) -> dict[str, Any]:
    """Run the smoke job; returns output parameters."""
    job = load_config(repo).smoke.model_copy(update={"workers": 1})
    return run_job(repo, out, "smoke", fresh=True, job_override=job, timeout=SMOKE_TIMEOUT_S)


def build_parser() -> argparse.ArgumentParser:
    """This step's arguments; tests parse every rendered template's argv with it."""
    return base_parser(__doc__.splitlines()[0])


def main(argv: Sequence[str] | None = None) -> int:
    """Container / CLI entry."""
    parser = build_parser()
    return run_main(lambda a: run(a.repo, a.out), parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
