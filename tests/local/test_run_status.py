"""How a run stands, from its own records: `workflows.run_events.summarize`
(pure) and `scan`, and `mlops status --runs` on real run directories laid out
as the post-receive hook lays them out (`<runs>/<sha>/{pid,push.json,out/}`)."""

import json
import pathlib
import subprocess
import sys

from workflows import run_events
from workflows.run_events import RunEvent, summarize

NOW = 1000.0


def _events(*specs):
    return [RunEvent(kind=k, at=at, **fields) for k, at, fields in specs]


def test_a_run_in_progress_names_its_current_task_and_its_age():
    events = _events(("run_started", 100.0, {}),
                     ("task_started", 101.0, {"task": "checkout"}),
                     ("task_finished", 102.0, {"task": "checkout", "phase": "Succeeded"}),
                     ("task_started", 103.0, {"task": "train"}))
    s = summarize("abc", pathlib.Path("o"), events, None, alive=True, now=NOW)
    assert (s.status, s.task, s.seconds, s.started_at) == ("Running", "train", 900.0, 100.0)


def test_a_run_whose_process_is_gone_without_run_finished_died():
    events = _events(("run_started", 100.0, {}), ("task_started", 101.0, {"task": "train"}))
    out = pathlib.Path("o")
    assert summarize("abc", out, events, None, alive=False, now=NOW).status == "Died"
    # unknown liveness (a run started by hand): still running as far as we know
    assert summarize("abc", out, events, None, alive=None, now=NOW).status == "Running"


def test_a_claimed_run_without_events_is_queued_while_its_process_waits():
    assert summarize("a", pathlib.Path("o"), [], None, alive=True, now=NOW).status == "Queued"
    assert summarize("a", pathlib.Path("o"), [], None, alive=False, now=NOW).status == "Died"


def test_a_failed_run_names_the_failing_task_and_its_message():
    events = _events(("run_started", 100.0, {}),
                     ("run_finished", 150.0, {"phase": "Failed", "seconds": 50.0,
                                              "message": "train: exit 1: CUDA: no"}))
    s = summarize("abc", pathlib.Path("o"), events, None, alive=False, now=NOW)
    assert (s.status, s.task, s.message, s.seconds) == ("Failed", "train", "exit 1: CUDA: no", 50.0)


def test_the_version_and_gate_come_from_task_outputs_and_run_json_wins():
    events = _events(("run_started", 100.0, {}),
                     ("task_finished", 120.0, {"task": "evaluate", "phase": "Succeeded",
                                               "outputs": {"passed": "false", "version": "v-1"}}),
                     ("run_finished", 130.0, {"phase": "Succeeded", "seconds": 30.0}))
    s = summarize("abc", pathlib.Path("o"), events, None, alive=None, now=NOW)
    assert (s.status, s.gate, s.version) == ("Succeeded", "refused", "v-1")
    record = {"outputs": {"passed": "true", "version": "v-2"}}
    s = summarize("abc", pathlib.Path("o"), events, record, alive=None, now=NOW)
    assert (s.gate, s.version) == ("passed", "v-2")


def test_a_rerun_into_the_same_out_dir_is_judged_by_its_latest_start():
    events = _events(("run_started", 100.0, {}),
                     ("run_finished", 110.0, {"phase": "Failed", "message": "train: boom"}),
                     ("run_started", 200.0, {}),
                     ("task_started", 201.0, {"task": "evaluate"}))
    s = summarize("abc", pathlib.Path("o"), events, None, alive=True, now=NOW)
    assert (s.status, s.task, s.started_at) == ("Running", "evaluate", 200.0)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _hook_run(runs: pathlib.Path, sha: str, pid: int, at: float) -> pathlib.Path:
    home = runs / sha
    (home / "out").mkdir(parents=True)
    (home / "pid").write_text(f"{pid}\n")
    (home / "push.json").write_text(json.dumps({"sha": sha, "at": at}))
    return home / "out"


def test_status_runs_lists_a_hooks_runs_oldest_first_and_spots_the_dead_one(tmp_path):
    runs = tmp_path / "runs"
    done = _hook_run(runs, "a" * 40, _dead_pid(), at=1.0)
    run_events.append(done, "run_started", workflow="wf")
    run_events.append(done, "task_finished", task="gate", phase="Succeeded",
                      outputs={"passed": "true", "version": "v-good"})
    run_events.append(done, "run_finished", workflow="wf", phase="Succeeded", seconds=12.0)
    died = _hook_run(runs, "b" * 40, _dead_pid(), at=2.0)
    run_events.append(died, "run_started", workflow="wf")
    run_events.append(died, "task_started", task="train")
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as sleeper:
        try:
            _hook_run(runs, "c" * 40, sleeper.pid, at=3.0)  # waiting in the queue
            shown = subprocess.run(
                [sys.executable, "-m", "mlops", "status", "--runs", str(runs), "--json",
                 "--workdir", str(tmp_path / "no-platform")],
                capture_output=True, text=True, timeout=60)
            text = subprocess.run(
                [sys.executable, "-m", "mlops", "status", "--runs", str(runs)],
                capture_output=True, text=True, timeout=60, cwd=tmp_path,
                env={**__import__("os").environ, "MLOPS_WORKDIR": str(tmp_path / "none")})
        finally:
            sleeper.kill()
    # an explicit --workdir without a platform is an error naming it, not a traceback
    assert shown.returncode != 0 and "no platform in" in shown.stderr, shown.stderr
    assert "Traceback" not in shown.stderr
    assert text.returncode == 0, text.stderr
    lines = [line for line in text.stdout.splitlines() if line.startswith("  ") and
             not line.startswith("   ")]
    assert [line.split()[:2] for line in lines] == [
        ["a" * 12, "Succeeded"], ["b" * 12, "Died"], ["c" * 12, "Queued"]]
    assert "version v-good, gate passed" in lines[0]


def test_status_runs_on_one_run_dir_and_a_missing_dir(tmp_path):
    out = tmp_path / "mlops-out" / "shapes"
    out.mkdir(parents=True)
    run_events.append(out, "run_started", workflow="wf")
    run_events.append(out, "run_finished", workflow="wf", phase="Failed", seconds=3.0,
                      message="smoke-train: exit 1")
    env = {**__import__("os").environ, "MLOPS_WORKDIR": str(tmp_path / "none")}
    shown = subprocess.run([sys.executable, "-m", "mlops", "status", "--runs", str(out), "--json"],
                           capture_output=True, text=True, timeout=60, env=env)
    assert shown.returncode == 0, shown.stderr
    (run,) = json.loads(shown.stdout)["runs"]
    assert (run["name"], run["status"], run["task"]) == ("shapes", "Failed", "smoke-train")
    missing = subprocess.run([sys.executable, "-m", "mlops", "status", "--runs",
                              str(tmp_path / "nope")], capture_output=True, text=True,
                             timeout=60, env=env)
    assert missing.returncode != 0 and f"--runs {tmp_path / 'nope'}" in missing.stderr
    assert "Traceback" not in missing.stderr
