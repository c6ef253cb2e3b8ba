"""Local pipeline overhead: how much of a run is not training or evaluation.

    python benchmarks/pipeline.py [--repo examples/shapes-detector] [--epochs N] [--from-run DIR]

Runs the example's pipeline with the local runner (the same Hera DAG Argo
runs) and splits the wall time into the time inside the training steps
(`smoke-train`, `train`) and the evaluation (`evaluate`), and everything
else: checkout stand-in, environment digest, gate, propose, exit handler,
and the runner's own bookkeeping (DAG walk, substitutions, logs, records).
The target is overhead < 10 % of the total.

`--epochs N` overrides the full job's epochs (on a copy of the repo) for a
quicker measurement; `--from-run DIR` re-reads an earlier run's run.json
instead of running. Results go to benchmarks/results/pipeline.json.

A repo whose pins are not there (the examples ship none: a pin names the team's
storage) gets its generator's week 1, written and pinned in the temp dir first;
`prepare-data` then counts as overhead.
"""

import argparse
import datetime as dt
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from local.argo.runner import run_workflow  # noqa: E402 (after the sys.path line above)
from workflows.config import load_config  # noqa: E402 (after the sys.path line above)
from workflows.pipeline import build_workflow_template  # noqa: E402 (after the sys.path line above)
from workflows.settings import load_settings  # noqa: E402 (after the sys.path line above)

WORK_STEPS = ("smoke-train", "train", "evaluate")
RESULTS = ROOT / "benchmarks" / "results" / "pipeline.json"


def _copy_with_epochs(repo: pathlib.Path, epochs: int, into: pathlib.Path) -> pathlib.Path:
    dest = into / repo.name
    shutil.copytree(repo, dest, ignore=shutil.ignore_patterns("data", "__pycache__", "mlops-out"))
    cfg = yaml.safe_load((dest / "mlops.yaml").read_text())
    cfg["training"]["full"].setdefault("overrides", {}).setdefault("args", {})["epochs"] = epochs
    (dest / "mlops.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return dest


def _pin_week_1(repo: pathlib.Path, into: pathlib.Path) -> pathlib.Path:
    """The repo (copied into `into` if it is not there yet) with its generator's week 1
    pinned where `data.train` says; the repo itself when its pins are there."""

    cfg = load_config(repo).config
    if cfg.data is None or (repo / cfg.data.train).is_file():
        return repo
    if not repo.is_relative_to(into):
        dest = into / repo.name
        shutil.copytree(repo, dest, ignore=shutil.ignore_patterns("data", "__pycache__"))
        repo = dest
    generator = next(p for p in sorted(repo.glob("*_data.py")))
    subprocess.run([sys.executable, str(generator), "--store", str(into / "datasets"),
                    "--week", "1"], check=True, capture_output=True)
    (repo / cfg.data.train).parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "mlops", "data", "snapshot",
                    str(into / "datasets" / "week-1"), "--name", "week-1",
                    "--out", str(repo / cfg.data.train)], check=True, capture_output=True)
    return repo


def summarise(run: dict, wall: float) -> dict:
    """Split a run's wall time into work (training + evaluation) and overhead."""
    tasks = {t["name"]: t for t in run["tasks"]}
    work = sum(tasks[n]["seconds"] for n in WORK_STEPS if n in tasks)
    overhead = wall - work
    return {
        "status": run["status"],
        "wall_seconds": round(wall, 3),
        "work_seconds": round(work, 3),
        "overhead_seconds": round(overhead, 3),
        "overhead_fraction": round(overhead / wall, 5) if wall else None,
        "target_fraction": 0.10,
        "meets_target": bool(wall and overhead / wall < 0.10),
        "tasks": {n: {"phase": t["phase"], "seconds": t["seconds"]} for n, t in tasks.items()},
    }


def main() -> int:
    """Run (or re-read) and save the result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=str(ROOT / "examples" / "shapes-detector"))
    parser.add_argument("--epochs", type=int, help="override the full job's epochs")
    parser.add_argument("--from-run", help="summarise an existing run directory instead")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()

    if args.from_run:
        run = json.loads((pathlib.Path(args.from_run) / "run.json").read_text())
        wall = float(run["seconds"])
        how = f"re-read from {args.from_run}"
    else:
        with tempfile.TemporaryDirectory(prefix="mlops-bench-") as tmp:
            repo = pathlib.Path(args.repo).resolve()
            if args.epochs:
                repo = _copy_with_epochs(repo, args.epochs, pathlib.Path(tmp))
            repo = _pin_week_1(repo, pathlib.Path(tmp))
            os.environ.setdefault("MLOPS_DATA_CACHE", str(pathlib.Path(tmp) / "data-cache"))
            wt = build_workflow_template(load_config(repo), load_settings())
            start = time.monotonic()
            result = run_workflow(wt, repo, pathlib.Path(tmp) / "run")
            wall = time.monotonic() - start
            run = json.loads((pathlib.Path(tmp) / "run" / "run.json").read_text())
        how = "measured" + (f" with the full job at {args.epochs} epoch(s)" if args.epochs else "")
        del result
    summary = summarise(run, wall)
    record = {
        "benchmark": "local pipeline overhead (wall minus training and evaluation steps)",
        "how": how,
        "repo": str(args.repo),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cores": os.cpu_count()},
        **summary,
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(
        f"wall {summary['wall_seconds']:.1f}s, training+evaluation {summary['work_seconds']:.1f}s, "
        f"overhead {summary['overhead_seconds']:.2f}s = {100 * summary['overhead_fraction']:.2f}% "
        f"(target < 10%: {'met' if summary['meets_target'] else 'NOT met'}) -> {out}"
    )
    return 0 if summary["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
