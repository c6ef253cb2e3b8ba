"""Warm start vs from scratch: the weekly retrain of the shapes example, at pipeline level.

Production is an export of the example's first version (its default recipe from
scratch, 2 workers: `--production DIR`, e.g. a demo's bootstrap), proposed
into a fresh bare GitOps repo. Then the example's real pipeline (the Hera
template, run by the local runner: smoke PaddleJob, 2-worker PaddleJob with
the full template, evaluate with production on the same images, paired gate)
runs once per variant:

* `scratch-14`: `args: {epochs: 14}` from random weights (the demo's good push until now);
* `warm-N`: `training.init_from: production` and `args: {epochs: N, ...}`.

Per variant: the train task's wall time, the steps trained, mAP@0.5 and
mAP@[.5:.95] of the served candidate, the paired difference with its 95 %
interval and the gate's verdict. Saves benchmarks/results/warm_start.json.

    python benchmarks/warm_start.py --production DIR [--variants scratch-14 warm-2 ...]
        [--lr-warm 0.001] [--work DIR]
"""

import argparse
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import time

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gitops.forges.local import LocalForge  # noqa: E402
from gitops.repo import init_repo  # noqa: E402
from local.argo.runner import run_workflow  # noqa: E402
from promotion.decision.policy import load_policy  # noqa: E402
from promotion.gitrepo.propose import propose  # noqa: E402
from workflows.config import load_config  # noqa: E402
from workflows.pipeline import build_workflow_template  # noqa: E402
from workflows.settings import load_settings  # noqa: E402

EXAMPLE = ROOT / "examples" / "shapes-detector"


def _git(cwd: pathlib.Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def variant_config(name: str, lr_warm: float | None) -> tuple[str | None, dict]:
    """(init_from, full args) of a variant name: scratch-N or warm-N."""
    kind, epochs = name.rsplit("-", 1)
    args: dict = {"epochs": int(epochs)}
    if kind == "warm":
        if lr_warm:
            args["lr"] = lr_warm
        return "production", args
    return None, args


def run_variant(work: pathlib.Path, gitops: pathlib.Path, name: str,
                lr_warm: float | None) -> dict:
    home = work / name
    shutil.rmtree(home, ignore_errors=True)
    repo = home / "repo"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns(
        "data", "out*", "ckpt*", "__pycache__", "mlops-out"))
    init_from, args = variant_config(name, lr_warm)
    cfg = yaml.safe_load((repo / "mlops.yaml").read_text())
    cfg["training"].pop("init_from", None)
    if init_from:
        cfg["training"]["init_from"] = init_from
    cfg["training"]["full"].setdefault("overrides", {})["args"] = args
    (repo / "mlops.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    _git(home, "init", "-q", "-b", "main", str(repo))
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=bench", "-c", "user.email=bench@example.com",
         "commit", "-qm", name)
    wt = build_workflow_template(load_config(repo), load_settings())
    start = time.monotonic()
    result = run_workflow(wt, repo, home / "out", parameters={"gitops-repo": str(gitops)},
                          echo=lambda _line: None)
    total = time.monotonic() - start
    train = result.task("train")
    out = home / "out" / "full"
    gate = json.loads((out / "gate.json").read_text()) if (out / "gate.json").is_file() else {}
    metrics = json.loads((out / "metrics.json").read_text()) if (
        out / "metrics.json").is_file() else {}
    record = yaml.safe_load((out / "model" / "model.yaml").read_text()) if (
        out / "model" / "model.yaml").is_file() else {}
    log = pathlib.Path(train.log).read_text() if train.log else ""
    return {
        "variant": name, "init_from": init_from, "args": args,
        "train_phase": train.phase, "train_seconds": round(train.seconds, 1),
        "run_seconds": round(total, 1),
        "steps": (record.get("hyperparameters") or {}).get("steps"),
        "warm_started": "init from /" in log,
        "map50": metrics.get("map50"), "map": metrics.get("map"),
        "difference_map50": gate.get("difference"), "verdict": gate.get("verdict"),
        "gate_passed": gate.get("passed"), "gate_reason": gate.get("reason"),
        "worse_classes": gate.get("worse_classes"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--production", required=True, type=pathlib.Path,
                        help="export of the example's first version (default recipe, 2 workers)")
    parser.add_argument("--variants", nargs="+", default=["warm-2", "warm-4", "scratch-14"])
    parser.add_argument("--lr-warm", type=float, default=None,
                        help="peak learning rate of the warm runs (default: train.py's)")
    parser.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/warm-start"))
    parser.add_argument("--out", type=pathlib.Path,
                        default=ROOT / "benchmarks" / "results" / "warm_start.json")
    a = parser.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    gitops = a.work / "gitops.git"
    if not gitops.exists():
        init_repo(gitops)
        published = a.work / "models" / "production"
        shutil.copytree(a.production, published)
        propose(published, str(gitops), LocalForge(gitops), load_policy({}), approval="auto")
    prod = yaml.safe_load((a.production / "model.yaml").read_text())
    results = []
    for name in a.variants:
        load_before = os.getloadavg()[0]
        row = run_variant(a.work, gitops, name, a.lr_warm)
        row["load_average_before"] = round(load_before, 1)
        results.append(row)
        print(json.dumps(row), flush=True)
        doc = {"production": {k: prod.get(k) for k in ("version", "metrics", "hyperparameters")},
               "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
               "note": "wall times on a 2-core machine shared with other jobs (load average "
                       "per variant); steps are exact",
               "results": results}
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
