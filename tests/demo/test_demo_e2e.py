"""`mlops demo --scenario all`, played once with real parts: git pushes to a bare
repo with the hook, the local runner with 2-process Paddle training, the gate,
the local forge's PRs, HAProxy, Prometheus, the sync loop and the promotion
controller under a steady load. No mock anywhere.

Seven pushes: the first version (350 steps from scratch on week 1), good and bad-labels
(1-epoch fine-tunes of production on weeks 2 and 3, lr 2e-3), the drills slow, errors and skew
(production's weights re-exported, `epochs: 0`) and low-map (10 steps from scratch); three
canaries. The demo alone took 11:03 on 2 cores shared with two other jobs (2026-11-26), so it
runs once per session and every test reads its results.
"""

import argparse
import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import pytest

from gitops.forges.local import LocalForge
from local.platform import lifecycle, procs
from local.platform.workdir import Workdir
from mlops.demo.story import Demo
from tests.demo import outside

# The demo runs in the first test's setup: pyproject.toml's 900 s per test is too short for it
pytestmark = [pytest.mark.slow, pytest.mark.critical_path, pytest.mark.timeout(2700)]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _system_tmp() -> pathlib.Path:
    """The machine's temp dir (tests/conftest.py gives each xdist worker its own)."""
    return pathlib.Path(os.environ.get("MLOPS_TEST_SYSTEM_TMP") or tempfile.gettempdir())


def _outside_roots() -> tuple[pathlib.Path, ...]:
    """Where the demo must write nothing: $HOME, the checkout and the machine's /tmp
    (its work dir aside)."""
    return pathlib.Path.home(), ROOT, _system_tmp()


@dataclasses.dataclass
class Outside:
    """How the demo ran: in a mount namespace whose overlays keep what it writes outside
    its work dir apart (tests/demo/outside.py), or, where none can be made, plainly."""

    isolated: outside.Isolated | None
    cannot: str | None  # why it ran plainly


@pytest.fixture(scope="module")
def demo_all(tmp_path_factory):
    """Run the whole demo once, leave the platform up, yield (work dir, its completed
    process, `Outside`). Only the demo's own processes see the overlays: what other
    processes on the machine write meanwhile is theirs."""
    work = tmp_path_factory.mktemp("demo") / "w"
    work.mkdir()  # bind-mounted through the overlays: it must exist
    argv = [sys.executable, "-m", "mlops", "demo", "--workdir", str(work), "--scenario", "all",
            "--keep-running", "--timeout", "1200"]
    # as a user runs it: the pushes' build-image builds the example's Dockerfile with podman
    env = {**os.environ, "TMPDIR": str(_system_tmp()), "MLOPS_IMAGE_BUILD": "podman"}
    out, err = work.parent / "demo.stdout", work.parent / "demo.stderr"
    isolated = outside.Isolated(_outside_roots(), work, argv, work.parent, env, out, err,
                                work.parent / "namespace.log")
    watch = Outside(isolated, isolated.started())
    try:
        if watch.cannot is not None:  # the other tests still read the demo's results
            watch.isolated = None
            proc = subprocess.run(argv, capture_output=True, text=True, cwd=work.parent,
                                  timeout=3600, env=env)
        else:
            code = isolated.wait_command(timeout=3600)
            proc = subprocess.CompletedProcess(argv, code, out.read_text(errors="replace"),
                                               err.read_text(errors="replace"))
        yield work, proc, watch
    finally:
        subprocess.run([sys.executable, "-m", "mlops", "down", "--workdir", str(work / "platform")],
                       capture_output=True, timeout=120)
        isolated.stop()


def _summary(work: pathlib.Path) -> dict:
    return json.loads((work / "summary.json").read_text())


def test_the_demo_exits_0_and_every_scenario_ends_as_expected(demo_all):
    work, proc, _ = demo_all
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    outcomes = {s["scenario"]: s for s in _summary(work)["scenarios"]}
    assert [name for name in outcomes] == ["bootstrap", "good", "slow", "errors", "skew",
                                           "bad-labels", "low-map"]
    assert outcomes["good"]["outcome"] == "promoted"
    assert outcomes["slow"]["outcome"] == "rolled_back"
    assert "latency" in outcomes["slow"]["reason"].lower() or "p99" in outcomes["slow"]["reason"]
    assert outcomes["errors"]["outcome"] == "rolled_back"
    assert "error" in outcomes["errors"]["reason"].lower()
    # skew: the gate runs the export as served, beside production on the same images
    assert outcomes["skew"]["outcome"] == "gate_refused", outcomes["skew"]
    assert "worse" in outcomes["skew"]["reason"], outcomes["skew"]["reason"]
    assert outcomes["skew"]["pull_requests"] == []
    # bad-labels: week 3's swapped labels train fine; the gate names the two classes
    bad = outcomes["bad-labels"]
    assert bad["outcome"] == "gate_refused", bad
    assert set(bad["worse_classes"]) >= {"circle", "square"}, bad["reason"]
    assert "worse beyond the class margin" in bad["reason"], bad["reason"]
    assert "circle on holdout" in bad["reason"] and "square on holdout" in bad["reason"]
    assert bad["pull_requests"] == []
    assert outcomes["low-map"]["outcome"] == "gate_refused"
    assert outcomes["low-map"]["pull_requests"] == []  # stopped at the gate: no PR
    versions = [s["version"] for s in outcomes.values()]
    assert len(set(versions)) == len(versions)  # every push is its own version
    # its processes shared one bytecode cache in the work dir (tests/demo/test_demo.py)
    assert list((work / "cache" / "pycache").rglob("paddle/__init__.*.pyc"))


def test_every_push_built_the_model_repos_image_as_the_cluster_step_does(demo_all):
    """Issue 42: with podman here, each push's build-image builds the model repo's own
    Dockerfile from its checkout and the step's BASE_IMAGE (mlops.images.stepbuild), or
    finds the image those very inputs made; the jobs are given that image."""
    work, _, _ = demo_all
    runs = sorted((work / "runs").glob("*/out/run.json"))
    assert len(runs) >= 7
    for run_file in runs:
        run = json.loads(run_file.read_text())
        tasks = {t["name"]: t for t in run["tasks"]}
        image = tasks["push-image"]["outputs"]["image"]
        assert image.startswith("localhost/mlops/shapes-detector-train:"), (run_file, image)
        log = (run_file.parent / "logs" / "build-image.log").read_text()
        assert "build-image: built " in log or "not built again" in log, log


def test_the_bad_labels_run_names_the_classes_in_its_verdict_and_report(demo_all):
    """Issue 30 at pipeline level: week 3's run trained fine; its gate verdict compared it
    with the version then in production (the good one) and names circle and square with
    their intervals; nothing was proposed; the run's report says it with the pictures."""
    work, _, _ = demo_all
    results = {s["scenario"]: s for s in _summary(work)["scenarios"]}
    bad = results["bad-labels"]
    out = work / "runs" / bad["commit"] / "out"
    run = json.loads((out / "run.json").read_text())
    phases = {task["name"]: task["phase"] for task in run["tasks"]}
    assert phases["train"] == "Succeeded" and phases["propose"] == "Skipped", phases
    verdict = json.loads((out / "full" / "gate.json").read_text())
    assert verdict["production_version"] == results["good"]["version"]
    assert {"circle", "square"} <= set(verdict["worse_classes"]), verdict["reason"]
    assert "[" in verdict["reason"].split("circle", 1)[1]  # with its interval
    branches = subprocess.run(["git", "--git-dir", str(work / "gitops.git"), "branch", "--list"],
                              capture_output=True, text=True).stdout
    assert bad["version"] not in branches  # no proposal branch
    report = pathlib.Path(bad["run_report"]).read_text()
    assert "**circle**" in report and "**square**" in report and "disagreements-val.png" in report


def test_the_good_push_is_week_2s_data_and_its_pr_shows_the_data_diff(demo_all):
    """Issue 29: the weekly retrain is a new data pin; its PR says what changed in the data
    against production's pin (week 1): images per split, classes, the label shift."""

    work, _, _ = demo_all
    good = next(s for s in _summary(work)["scenarios"] if s["scenario"] == "good")
    assert good["message"].startswith("data: week 2 arrives")
    # the good version's own PR (later PRs name it too, as their stable)
    body = next(pr.body for pr in LocalForge(work / "gitops.git").list_prs(None)
                if pr.body.startswith(f"## Promote `shapes-detector` `{good['version']}`"))
    assert ("**Data: shapes-detector-week-1 → shapes-detector-week-2**: +250 images, "
            "50 removed, 'triangle' +") in body, body
    assert "| train | 1,600 | 1,800 | +250 | -50 |" in body, body
    assert "| val | 500 | 500 | +0 | -0 |" in body, body
    assert "label shift (TVD)" in body


def test_the_gitops_history_tells_the_good_story_in_order(demo_all):
    work, proc, _ = demo_all
    summary = _summary(work)
    good = next(s for s in summary["scenarios"] if s["scenario"] == "good")["version"]
    log = subprocess.run(["git", "--git-dir", str(work / "gitops.git"), "log", "--reverse",
                          "--format=%s", "main"], capture_output=True, text=True).stdout
    # lines about the good version as the candidate; later canaries name it as
    # the stable one ("v-x over <good>", "replaces <good>")
    mine = [line for line in log.splitlines()
            if good in line and f"over {good}" not in line and f"replaces {good}" not in line]
    text = "\n".join(mine)
    # proposal merged (the approval), then 10 -> 25 -> 50 -> 100, then the finalise
    steps = [int(m) for m in re.findall(r"-> (\d+)%", text)]
    assert steps[:3] == [25, 50, 100] or steps[:4] == [10, 25, 50, 100], text
    assert re.search(r"promot", mine[-1]), text
    assert any("approve" in line.lower() or "merge" in line.lower() for line in log.splitlines())
    # the summary's history shows the approvals (merged PRs) too
    assert any("Merge pull request" in line for line in summary["gitops_log"]), summary[
        "gitops_log"
    ]


def test_the_gitops_repo_after_the_demo_passes_the_gitops_lint(demo_all):
    """Schemas of every applied file and the cross-file rules, on what the demo left
    (the local platform scrapes every second, hence the scrape interval)."""
    work, _, _ = demo_all
    lint = subprocess.run([sys.executable, "-m", "mlops", "gitops", "lint", "--repo",
                           str(work / "gitops.git"), "--scrape-interval", "1s"],
                          capture_output=True, text=True, timeout=120)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert ": valid" in lint.stdout


def test_the_canary_report_and_plot_exist_for_each_canary(demo_all):
    work, _, _ = demo_all
    reports = sorted((work / "controller" / "rollouts").glob("shapes-detector/*/report.md"))
    assert len(reports) >= 3  # good, slow, errors (skew stops at the gate)
    assert all(list(r.parent.glob("*.png")) for r in reports)
    # and the demo named each canary's report when its canary ended
    canaries = [s for s in _summary(work)["scenarios"]
                if s["scenario"] in ("good", "slow", "errors")]
    assert all(pathlib.Path(s["canary_report"]).is_file() for s in canaries), canaries


def test_mlops_down_leaves_no_process_and_nothing_is_written_outside_the_work_dir(demo_all):
    """Nothing the demo's processes wrote under $HOME, the checkout or /tmp outside its
    work dir is left changed; and after `mlops down` none of them is left, the platform's
    or any other. Only their own writes count: they ran in a mount namespace whose
    overlays hold what they wrote (tests/demo/outside.py); other processes on the
    machine (other xdist workers, other jobs) write to the real directories. A temporary
    file the demo removed itself is not a change; nor is Python's bytecode cache.

    So Paddle's `~/.cache/paddle/to_static_tmp/<pid>/` (every `paddle.jit.to_static`
    writes one and removes it when its process exits: paddle/jit/dy2static/utils.py
    `get_temp_dir`) counts when a demo process left one, and another process's (an
    xdist worker's test exporting a model meanwhile, which failed CI once) cannot show."""
    work, proc, watch = demo_all
    assert watch.cannot is None, watch.cannot
    platform = work / "platform"
    assert procs.processes_of(str(platform)), "with --keep-running the platform stays up"
    down = subprocess.run([sys.executable, "-m", "mlops", "down", "--workdir", str(platform)],
                          capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert procs.processes_of(str(platform)) == []
    left = watch.isolated.left_behind()
    assert left == [], [outside.command_line(pid) for pid in left]
    assert watch.isolated.changes() == []


def test_a_second_run_on_the_same_work_dir_replaces_the_first(demo_all):
    """Set-up only (the repos and the platform come back fresh); the full replay
    would take another 8 minutes and runs the same code as the first."""

    work, _, _ = demo_all
    args = argparse.Namespace(workdir=str(work), scenario="good", wait_approval=False,
                              keep_running=False, rps=5.0, preset=None, show_every=5.0,
                              timeout=120.0)
    demo = Demo(args)
    try:
        demo.set_up()
        assert lifecycle.status(Workdir(work / "platform"))["services"]["sync"]["running"]
        assert not (work / "summary.json").exists()
        assert not (work / "runs").exists() or not any((work / "runs").iterdir())
        heads = subprocess.run(["git", "--git-dir", str(work / "model.git"), "branch"],
                               capture_output=True, text=True).stdout
        assert heads.strip() == ""  # a new, empty model repo
    finally:
        demo.stop()
    assert procs.processes_of(str(work / "platform")) == []
