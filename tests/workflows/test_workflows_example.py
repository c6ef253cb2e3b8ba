"""The real example, pushed into a fresh bare repo set up by mlops, trains for real.

The pushed copy of examples/shapes-detector differs in its mlops.yaml's job
args: each job runs 2 steps instead of the example's hundreds, so the test
takes seconds, not minutes. Its data is the example's week 1, written by its
generator (shrunk to 64 training and 16 val images: the test reads no score)
into a store beside the repo and pinned with `mlops data snapshot` as a team
would. Everything else is real: the
post-receive hook, a checkout of the pushed sha, prepare-data, the smoke PaddleJob and
the two-worker PaddleJob run from its rendered manifest (each worker a
`paddle.distributed.launch` with paddle-operator's env), COCO evaluation and
the gate. The run must end at the gate with a report.
"""

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from mlops.cli import main as cli
from tests.fixtures.workflows import git, push_capture, wait_for_run

EXAMPLE = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "shapes-detector"


@pytest.mark.slow
def test_push_of_the_example_trains_and_ends_at_the_gate(tmp_path, runs_cleanup, monkeypatch):
    repo = tmp_path / "shapes-detector"
    shutil.copytree(
        EXAMPLE, repo, ignore=shutil.ignore_patterns("data", "__pycache__", "mlops-out")
    )
    cfg = yaml.safe_load((repo / "mlops.yaml").read_text())
    # 2 steps of the full job's recipe: enough for two workers to form the collective, step
    # together and export (the demo's end-to-end test trains the whole recipe); the smoke
    # job's 1 step proves it runs as well as its template's 20 would, and keeps it below
    # the full job's, or the pipeline would rightly run no smoke job (workflows.jobplan)
    cfg["training"]["full"].setdefault("overrides", {}).setdefault("args", {}).update(
        {"epochs": 1, "max-steps": 2})
    cfg["training"]["smoke"].setdefault("overrides", {}).setdefault("args", {}).update(
        {"max-steps": 1})
    (repo / "mlops.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    store = tmp_path / "datasets"
    subprocess.run([sys.executable, str(EXAMPLE / "shapes_data.py"), "--store", str(store),
                    "--week", "1", "--num-train", "64", "--num-val", "16"],
                   check=True, capture_output=True)
    assert cli(["data", "snapshot", str(store / "week-1"), "--name", "shapes-week-1",
                "--out", str(repo / "data" / "shapes.lock")]) == 0
    monkeypatch.setenv("MLOPS_DATA_CACHE", str(tmp_path / "data-cache"))  # the run inherits it
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "shapes detector")
    bare = tmp_path / "shapes-detector.git"
    assert cli(["hooks", "init-bare", str(bare)]) == 0
    runs_cleanup.append(bare / "mlops-runs")
    git(repo, "remote", "add", "origin", str(bare))

    sha = git(repo, "rev-parse", "HEAD")
    assert "started a local run" in push_capture(repo, "main")
    home = bare / "mlops-runs" / sha
    run = wait_for_run(home, timeout=40 * 60)
    phases = {t["name"]: t["phase"] for t in run["tasks"]}
    for name in ("checkout", "prepare-data", "build-image", "smoke-train", "train", "evaluate",
                 "gate"):
        assert phases[name] == "Succeeded", (name, (home / "run.log").read_text()[-3000:])
    out = home / "out"
    metrics = json.loads((out / "full" / "metrics.json").read_text())
    assert 0.0 <= metrics["map50"] <= 1.0
    gate = json.loads((out / "full" / "gate.json").read_text())
    assert gate["metric"] == "map50" and gate["value"] == pytest.approx(metrics["map50"], abs=1e-6)
    report = (out / "report.md").read_text()
    assert ("PASS" in report) or ("FAIL" in report)
    assert (out / "full" / "model" / "model.yaml").is_file()
    record = yaml.safe_load((out / "full" / "model" / "model.yaml").read_text())
    assert record.get("training_commit") == sha
    pinned = json.loads((repo / "data" / "shapes.lock").read_text())["digest"]
    assert record["dataset_digest"] == pinned and record["dataset"] == "shapes-week-1"
    # Two PaddleJob workers, each a launcher with the operator's env, made one collective.
    launched = sorted(p.name for p in (out / "full" / "launch-logs").iterdir())
    assert launched == ["worker-0", "worker-1"]
    train_log = (home / "out" / "logs" / "train.log").read_text()
    assert "PaddleJob" in train_log and "2 worker(s)" in train_log
    assert "[worker-0] " in train_log and "[worker-1] " in train_log
    assert "paddle.distributed.launch" in train_log

    # A second commit starts its own run (and a rewrite of main is refused by the repo).
    (repo / "NOTES.md").write_text("next\n")
    git(repo, "add", "NOTES.md")
    git(repo, "commit", "-qm", "notes")
    sha2 = git(repo, "rev-parse", "HEAD")
    assert f"started a local run of {sha2[:12]}" in push_capture(repo, "main")
    # Stop the second run at once: it is not what this test measures.
    import os
    import signal
    import time

    pid_file = bare / "mlops-runs" / sha2 / "pid"
    for _ in range(100):
        if pid_file.exists():
            break
        time.sleep(0.1)
    try:
        os.killpg(int(pid_file.read_text()), signal.SIGTERM)
    except (ProcessLookupError, FileNotFoundError, ValueError):
        pass
