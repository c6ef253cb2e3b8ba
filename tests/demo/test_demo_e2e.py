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
from tests.fixtures.images import store_root

# The demo runs in the first test's setup: pyproject.toml's 900 s per test is too short for it
pytestmark = [pytest.mark.slow, pytest.mark.critical_path, pytest.mark.timeout(2700)]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _snapshot(roots: tuple[pathlib.Path, ...], skip: tuple[pathlib.Path, ...]) -> dict[str, tuple]:
    """Every file under `roots` (outside `skip`, bytecode caches and the test tools' own
    caches, which other workers' tests write in the checkout meanwhile) with its
    mtime and size. Two snapshots are compared, not mtimes against the wall
    clock: a file server's clock may run ahead of ours.

    GNU find walks, not os.walk: $HOME alone holds ~300,000 files here (toolchains,
    Python), which cost os.walk and lstat ~7 CPU-s and 9 s a walk on the demo's critical
    path, find ~2. As os.walk would: symlinks to directories are not files (`! -xtype
    d`), and files that vanish during the walk (other workers' temp files) are skipped."""
    pruned = [("-name", name) for name in ("__pycache__", ".pytest_cache", ".hypothesis")]
    pruned += [("-path", str(s)) for s in skip]  # find's -path matches as fnmatch does
    expr = [arg for i, (test, pattern) in enumerate(pruned)
            for arg in ([] if i == 0 else ["-o"]) + [test, pattern]]
    walk = subprocess.run(
        ["find", *map(str, roots), "(", *expr, ")", "-prune", "-o", "!", "-xtype", "d",
         "-printf", "%p\\0%T@\\0%s\\0"],
        capture_output=True, timeout=600)
    assert walk.returncode in (0, 1), walk.stderr.decode(errors="replace")[-2000:]  # 1: vanished
    fields = walk.stdout.split(b"\0")[:-1]
    return {fields[i].decode(errors="surrogateescape"): (fields[i + 1], fields[i + 2])
            for i in range(0, len(fields), 3)}


def _system_tmp() -> pathlib.Path:
    """The machine's temp dir (tests/conftest.py gives each xdist worker its own)."""
    return pathlib.Path(os.environ.get("MLOPS_TEST_SYSTEM_TMP") or tempfile.gettempdir())


def _outside_roots(work: pathlib.Path) -> tuple[tuple[pathlib.Path, ...], tuple[pathlib.Path, ...]]:
    """$HOME, the checkout and /tmp; skipping pytest's own temp root (it holds
    the work dir), git's and pip's files in the checkout, and the podman store
    tests/images/test_images.py builds into on the other worker (its TMPDIR included:
    tests/fixtures/images.py)."""
    pytest_tmp = next(p for p in work.parents if p.name.startswith("pytest-of-"))
    roots = (pathlib.Path.home(), ROOT, _system_tmp())
    # MLOPS_TEST_OUTSIDE_SKIP (paths or glob patterns joined by os.pathsep):
    # directories another program on the machine writes while the suite runs
    # (a developer's shell logging its jobs under /tmp); unset, as in CI, the
    # check is whole
    extra = tuple(pathlib.Path(p) for p in
                  os.environ.get("MLOPS_TEST_OUTSIDE_SKIP", "").split(os.pathsep) if p)
    # scripts/test.sh runs mypy beside the tests with its cache in MYPY_CACHE_DIR
    mypy_cache = tuple(pathlib.Path(p) for p in [os.environ.get("MYPY_CACHE_DIR", "")] if p)
    return roots, (pytest_tmp, ROOT / ".git", ROOT / "paddle_mlops.egg-info", store_root(),
                   *mypy_cache, *extra)


@pytest.fixture(scope="module")
def demo_all(tmp_path_factory):
    """Run the whole demo once, leave the platform up, yield (work dir, output,
    snapshot of the files outside the work dir taken before it started)."""
    work = tmp_path_factory.mktemp("demo") / "w"
    before = _snapshot(*_outside_roots(work))
    proc = subprocess.run(
        [sys.executable, "-m", "mlops", "demo", "--workdir", str(work), "--scenario", "all",
         "--keep-running", "--timeout", "1200"],
        capture_output=True, text=True, cwd=work.parent, timeout=3600,
        env={**os.environ, "TMPDIR": str(_system_tmp())})  # as a user runs it
    try:
        yield work, proc, before
    finally:
        subprocess.run([sys.executable, "-m", "mlops", "down", "--workdir", str(work / "platform")],
                       capture_output=True, timeout=120)


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
    assert "| val | 200 | 200 | +0 | -0 |" in body, body
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
    work, proc, before = demo_all
    platform = work / "platform"
    assert procs.processes_of(str(platform)), "with --keep-running the platform stays up"
    down = subprocess.run([sys.executable, "-m", "mlops", "down", "--workdir", str(platform)],
                          capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert procs.processes_of(str(platform)) == []
    # the rest of /tmp, $HOME and the checkout must not have changed while the demo ran
    alive = _pids()
    after = _snapshot(*_outside_roots(work))
    alive |= _pids()  # alive when the walk began or when it ended
    outside = sorted(path for path, stat in after.items()
                     if before.get(path) != stat and not _another_live_paddle(path, alive))
    assert outside == []


def _pids() -> set[str]:
    return {p.name for p in pathlib.Path("/proc").iterdir() if p.name.isdigit()}


def _another_live_paddle(path: str, alive: set[str]) -> bool:
    """A file in Paddle's @to_static scratch dir of a process alive during the walk.

    Every `paddle.jit.to_static` writes `~/.cache/paddle/to_static_tmp/<pid>/`
    (paddle/jit/dy2static/utils.py `get_temp_dir`) and removes it when that
    process exits. After `mlops down` no demo process is alive (checked above),
    so a live pid there is another xdist worker's test exporting a model at this
    moment (CI failed on exactly that once); a dead demo process's leftovers
    still count."""
    scratch = pathlib.Path.home() / ".cache" / "paddle" / "to_static_tmp"
    parts = pathlib.Path(path).relative_to(scratch).parts if path.startswith(
        str(scratch) + os.sep) else ()
    return bool(parts) and parts[0] in alive


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
