"""`train`: the full training job, resuming from its checkpoints if interrupted."""

import argparse
from typing import Any, Sequence

from workflows.steps.common import base_parser, run_main
from workflows.steps.training_job import run_job


def run(repo: str, out: str) -> dict[str, Any]:
    """Run the full job; returns output parameters (model_dir, version, ...)."""
    return run_job(repo, out, "full", fresh=False)


def build_parser() -> argparse.ArgumentParser:
    """This step's arguments; tests parse every rendered template's argv with it."""
    return base_parser(__doc__.splitlines()[0])


def main(argv: Sequence[str] | None = None) -> int:
    """Container / CLI entry."""
    parser = build_parser()
    return run_main(lambda a: run(a.repo, a.out), parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
