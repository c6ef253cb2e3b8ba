"""The demo's pure parts: scenarios, the mlops.yaml edit, the timeline, the canary view.

The whole demo, with real parts, is played in tests/demo/test_demo_e2e.py.
"""

import argparse
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from mlops.cli import main
from mlops.demo import modelrepo, scenarios, timeline, watch
from mlops.demo.story import Demo, _training_progress, _val_images
from promotion.decision.state import load_state
from tests.fixtures.common import free_port
from tests.fixtures.training import example_module
from workflows import run_events

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE_CONFIG = ROOT / "examples/shapes-detector/mlops.yaml"


def test_plan_all_plays_good_first_then_the_five_failures():
    names = [s.name for s in scenarios.plan("all")]
    assert names == ["good", "slow", "errors", "skew", "bad-labels", "low-map"]
    assert [s.expect for s in scenarios.plan("all")] == [
        "promoted", "rolled_back", "rolled_back", "gate_refused", "gate_refused",
        "gate_refused"]


def test_bad_labels_pins_week_3_as_the_weekly_fine_tune_and_expects_its_classes_named():
    """Issue 30: week 3's data (a share of its new circle and square labels swapped),
    trained as the good push is; the gate must refuse it naming both classes. The
    example's generator has that week, swapping exactly those two classes."""
    bad, good = scenarios.plan("bad-labels")[0], scenarios.plan("good")[0]
    assert scenarios.SCENARIOS["bad-labels"] == bad
    assert bad.week == 3 and bad.change == good.change == {"epochs": 1, "lr": 0.002}
    assert bad.expect == "gate_refused" and bad.expect_classes == ("circle", "square")
    assert bad.message.startswith("data: week 3 arrives (400 new images, 3 in 4 of their "
                                  "circle and square labels swapped; 400 retired)")
    shapes = scenarios.example("shapes-detector")
    week = example_module("shapes_data").WEEKS[3]
    names = {c["id"]: c["name"] for c in example_module("shapes_data").CATEGORIES}
    assert tuple(names[i] for i in week["swap"]) == shapes.bad_labels
    # the holdout it is judged on is pinned by the example's mlops.yaml
    assert yaml.safe_load(EXAMPLE_CONFIG.read_text())["data"]["holdout"] == "data/shapes.lock"


def test_an_example_without_a_bad_week_skips_bad_labels_and_refuses_it_alone():
    names = [s.name for s in scenarios.plan("all", "products-yolov3")]
    assert names == ["good", "slow", "errors", "skew", "low-map"]
    with pytest.raises(ValueError, match="products-yolov3 example's data has none"):
        scenarios.plan("bad-labels", "products-yolov3")


def test_plan_rejects_an_unknown_scenario_naming_the_choices():
    with pytest.raises(ValueError, match="good, slow, errors, skew, bad-labels, low-map"):
        scenarios.plan("flaky")


@pytest.mark.parametrize("name", sorted(scenarios.EXAMPLES))
def test_each_example_is_a_model_repo_whose_defaults_the_good_scenario_extends(name):
    """The demo's example table matches the repos: directory = mlops.yaml's model, and
    the first push's epochs are train.py's default (the good push trains two more)."""

    root = pathlib.Path(__file__).resolve().parents[2] / "examples" / name
    example = scenarios.example(name)
    assert yaml.safe_load((root / "mlops.yaml").read_text())["model"] == name
    train = (root / "train.py").read_text()
    # the kit's parser takes the repo's default epochs (modelkit.training_parser(epochs=N))
    default = re.search(r"training_parser\([^)]*\bepochs=(\w+)", train, re.S).group(1)
    if not default.isdigit():  # a module constant
        default = re.search(rf"^{default} = (\d+)$", train, re.M).group(1)
    assert int(default) == example.epochs
    good = scenarios.plan("good", name)[0]
    assert good.expect == "promoted"
    if example.generator:  # the weekly retrain is week 2's data
        assert (root / example.generator).is_file()
        assert good.week == 2
        assert yaml.safe_load((root / "mlops.yaml").read_text())["data"]["train"]
    if example.fine_tune is not None:  # a fine-tune of production, as its mlops.yaml asks
        assert good.change == example.fine_tune
        assert yaml.safe_load((root / "mlops.yaml").read_text())[
            "training"]["init_from"] == "production"
    elif example.generator:
        assert good.change == {}
    else:
        assert good.change == {"epochs": example.epochs + 2} and good.week == 0
    assert f"({example.epochs} epochs)" in example.bootstrap_message()
    assert [s.name for s in scenarios.plan("all", name)] == [
        n for n in scenarios.NAMES if n != "bad-labels" or example.bad_labels]


def test_an_unknown_example_is_refused_naming_the_known_ones(capsys):
    with pytest.raises(ValueError, match="shapes-detector, products-yolov3"):
        scenarios.example("cats")

    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--example", "cats"])
    assert exit_info.value.code == 2
    assert "products-yolov3" in capsys.readouterr().err


def test_each_example_plays_the_skew_its_own_train_py_exports():
    """The skew scenario's mistake is the example's own (`Example.skew`): a choice of
    that example's `--drill-skew`, and not the same for both (their models fail on
    different mistakes; scenarios.Example says what was measured)."""
    skews = {}
    for name, example in scenarios.EXAMPLES.items():
        skew = next(s for s in scenarios.plan("all", name) if s.name == "skew")
        # what the pipeline runs: the example's own command line accepts the choice
        helped = subprocess.run([sys.executable, str(ROOT / "examples" / name / "train.py"),
                                 "--help"], capture_output=True, text=True, timeout=120)
        choices = re.search(r"--drill-skew \{([^}]*)\}", helped.stdout)
        assert choices, helped.stdout + helped.stderr
        # a fine-tuning example re-exports production's weights for a drill (no training)
        assert skew.change == ({"drill-skew": example.skew, "epochs": 0} if example.fine_tune
                               else {"drill-skew": example.skew})
        assert example.skew in choices.group(1).split(",") and example.skew != "none"
        assert f"--drill-skew {example.skew}" in skew.message
        assert skew.expect == "gate_refused" and skew.expect_cause == "worse"
        skews[name] = example.skew
    assert skews == {"shapes-detector": "no-scale", "products-yolov3": "mean-std"}
    assert scenarios.SCENARIOS["skew"] == scenarios.plan("skew")[0]


def test_a_bad_scenario_keeps_productions_args_and_adds_its_change():
    slow = scenarios.SCENARIOS["slow"]
    # the default example fine-tunes production: a drill re-exports its weights (0 epochs)
    assert slow.args({"epochs": 2, "lr": 0.001}) == {"epochs": 0, "lr": 0.001,
                                                     "drill-delay-ms": 250}
    from_scratch = scenarios.plan("slow", "products-yolov3")[0]
    assert from_scratch.args({"epochs": 16}) == {"epochs": 16, "drill-delay-ms": 250}
    # low-map overrides the epochs production was trained with
    assert scenarios.SCENARIOS["low-map"].args({"epochs": 14}) == {"epochs": 1, "max-steps": 10,
                                                                     "init-from": ""}


@pytest.mark.parametrize("run, final, expected", [
    ({"status": "Failed", "gate": {"passed": False, "reason": "map50 0.2 < 0.85"}}, None,
     "gate_refused"),
    ({"status": "Failed", "gate": None}, None, "pipeline_failed"),
    ({"status": "Succeeded", "gate": {"passed": True}}, None, None),
    (None, {"phase": "idle", "stable": "v-b", "candidate": None}, "promoted"),
    (None, {"phase": "promoted", "stable": "v-b", "candidate": "v-b"}, "promoted"),
    (None, {"phase": "rolled_back", "stable": "v-a", "candidate": "v-b"}, "rolled_back"),
    (None, {"phase": "progressing", "stable": "v-a", "candidate": "v-b"}, None),
    # another version's rollback says nothing about v-b
    (None, {"phase": "rolled_back", "stable": "v-a", "candidate": "v-c"}, None),
])
def test_outcome_of(run, final, expected):
    state = None if final is None else load_state({"model": "shapes", **final})
    assert scenarios.outcome_of(run, state, "v-b") == expected


def test_setting_args_keeps_comments_and_changes_one_line():
    text = EXAMPLE_CONFIG.read_text()
    edited = modelrepo.full_args_text(text, {"epochs": 14, "drill-delay-ms": 250})
    assert [line for line in edited.splitlines() if line.startswith("#") or "  #" in line] == [
        line for line in text.splitlines() if line.startswith("#") or "  #" in line]
    added = set(edited.splitlines()) - set(text.splitlines())
    assert added == {"      args: {epochs: 14, drill-delay-ms: 250}"}
    config = yaml.safe_load(edited)
    assert config["training"]["full"]["overrides"] == {
        "args": {"epochs": 14, "drill-delay-ms": 250}, "workers": 2}


def test_setting_args_again_replaces_the_previous_line_and_empty_removes_it():
    text = EXAMPLE_CONFIG.read_text()
    once = modelrepo.full_args_text(text, {"epochs": 14})
    twice = modelrepo.full_args_text(once, {"epochs": 1})
    assert yaml.safe_load(twice)["training"]["full"]["overrides"]["args"] == {"epochs": 1}
    assert twice.count("args:") == 1
    assert modelrepo.full_args_text(twice, {}) == text


def test_a_long_work_dir_path_in_the_args_stays_on_one_line():
    """The demo's args carry `--weights-cache` under the work dir; PyYAML folds a
    flow mapping at 80 columns, so under a deep work dir (pytest-xdist's
    `popen-gw0/`) the `errors` push was refused as "not one line"."""
    production = {"weights-cache": "/tmp/pytest-of-root/pytest-10/popen-gw0/demo0/w/cache/weights",
                  "epochs": 14}
    slow = modelrepo.full_args_text(EXAMPLE_CONFIG.read_text(), {**production,
                                                                 "drill-delay-ms": 250})
    errors = {**production, "drill-error-rate": 0.3}
    edited = modelrepo.full_args_text(slow, errors)  # replaces slow's line: all of it
    assert yaml.safe_load(edited)["training"]["full"]["overrides"]["args"] == errors
    added = set(edited.splitlines()) - set(EXAMPLE_CONFIG.read_text().splitlines())
    assert len(added) == 1


def test_args_written_as_a_block_are_refused_not_half_edited():
    text = EXAMPLE_CONFIG.read_text().replace(
        "    overrides:\n      workers: 2\n",
        "    overrides:\n      workers: 2\n      args:\n        epochs: 3\n")
    with pytest.raises(modelrepo.ModelRepoEditError, match="mlops.yaml: could not set"):
        modelrepo.full_args_text(text, {"epochs": 14})


def test_a_config_without_a_full_job_is_refused():
    with pytest.raises(modelrepo.ModelRepoEditError, match="no training.full.overrides"):
        modelrepo.full_args_text("model: m\ntraining:\n  command: [python]\n", {"epochs": 2})


def test_breakdown_parts_add_up_to_push_to_canary_start():
    run = {"tasks": [
        {"name": "checkout", "seconds": 0.5}, {"name": "build-image", "seconds": 1.0},
        {"name": "prepare-data", "seconds": 2.0},
        {"name": "smoke-train", "seconds": 20.0}, {"name": "train", "seconds": 150.0},
        {"name": "evaluate", "seconds": 3.0}, {"name": "gate", "seconds": 1.0},
        {"name": "propose", "seconds": 2.0}]}
    marks = {"push": 1000.0, "run_done": 1180.0, "approved": 1182.0, "canary_start": 1184.5,
             "finished": 1300.0}
    out = timeline.breakdown(marks, run)
    parts = out["parts"]
    assert parts["training_s"] == 170.0
    assert parts["evaluation_s"] == 3.0
    assert parts["proposal_s"] == 3.0
    assert parts["data_s"] == 2.0  # the pinned data's fetch and checks: its own part
    assert parts["pipeline_overhead_s"] == pytest.approx(2.0)
    assert parts["sync_s"] == 2.5
    assert sum(parts.values()) == pytest.approx(out["push_to_canary_start_s"]) == 184.5
    assert out["push_to_finished_s"] == 300.0 and out["canary_s"] == 115.5


def test_a_run_without_a_smoke_job_is_all_training_in_its_train_task():
    """A drill's or low-map's run has no smoke-train task (workflows.jobplan): nothing is
    missing from the breakdown, the parts still add up to the whole."""
    run = {"tasks": [{"name": "checkout", "seconds": 0.5}, {"name": "train", "seconds": 9.0},
                     {"name": "evaluate", "seconds": 3.0}, {"name": "gate", "seconds": 1.0}]}
    out = timeline.breakdown({"push": 0.0, "run_done": 15.0}, run)
    assert out["parts"]["training_s"] == 9.0 and "smoke-train" not in out["tasks_s"]
    assert sum(out["parts"].values()) == pytest.approx(out["pipeline_s"]) == 15.0


def test_breakdown_of_a_refused_run_has_no_canary_parts():
    out = timeline.breakdown({"push": 0.0, "run_done": 40.0}, {"tasks": []})
    assert "push_to_canary_start_s" not in out and "sync_s" not in out["parts"]
    assert out["parts"]["pipeline_overhead_s"] == 40.0


def test_views_join_weights_and_metrics_stable_first():
    measures = {"v-b": {"rps": 4.0, "error_share": 0.25, "p99_ms": 260.0},
                "v-a": {"rps": 36.0, "error_share": 0.0, "p99_ms": 4.0}}
    rows = watch.views(measures, {"v-a": 90, "v-b": 10}, stable="v-a", candidate="v-b")
    assert [(r.version, r.role, r.weight) for r in rows] == [("v-a", "stable", 90),
                                                            ("v-b", "canary", 10)]
    assert rows[0].error_rate == 0.0 and rows[1].error_rate == 0.25
    assert rows[1].p99_ms == pytest.approx(260.0)
    line = watch.render(rows)
    assert "v-a stable  90%" in line and "err 25.0%" in line and "p99 260 ms" in line


def test_views_drop_a_drained_rolled_back_version_and_show_missing_numbers_as_dashes():
    rows = watch.views({}, {"v-a": 100, "v-old": 0}, stable="v-a", candidate=None)
    assert [r.version for r in rows] == ["v-a"]
    assert watch.render(rows) == "v-a stable 100% -  err -  p99 -"


def test_the_demo_reads_live_rates_where_the_ui_does():
    """One home for the live rates (issue 28): the status line asks `promotion.metrics.live`
    with the controller's preset; an unreachable Prometheus is no numbers, not a crash."""

    assert watch.observe(f"http://127.0.0.1:{free_port()}", "m", ["v1"]) == {}
    assert not hasattr(watch, "queries")  # no hand-written PromQL beside the presets


def test_progress_is_read_from_run_events_and_the_training_log(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("config: world=2 images=2000 steps_per_epoch=32 total_steps=384 lr=0.004\n"
                   "step=10 epoch=0 loss=3.1\nstep=20 epoch=0 loss=2.2\n")
    out = tmp_path / "out"
    out.mkdir()
    assert run_events.current_task(run_events.read(out)) is None  # no run yet
    run_events.append(out, "run_started", workflow="shapes-local")
    run_events.append(out, "task_started", task="smoke-train", log=str(tmp_path / "smoke.log"))
    run_events.append(out, "task_finished", task="smoke-train", phase="Succeeded", seconds=12.0)
    run_events.append(out, "task_started", task="train", log=str(log))
    with open(out / run_events.EVENTS_FILE, "a") as fh:
        fh.write('{"kind": "task_fini')  # a line being written is skipped, not an error
    events = run_events.read(out)
    assert run_events.current_task(events).task == "train"
    assert _training_progress(pathlib.Path(run_events.current_task(events).log)) == (20, 384)
    assert run_events.finished(events) is None
    with open(out / run_events.EVENTS_FILE, "a") as fh:
        fh.write("\n")
    run_events.append(out, "task_finished", task="train", phase="Succeeded", seconds=150.0,
                      outputs={"version": "v-1"})
    run_events.append(out, "run_finished", workflow="shapes-local", phase="Succeeded")
    events = run_events.read(out)
    assert run_events.current_task(events) is None
    assert run_events.finished(events).phase == "Succeeded"
    assert [e.outputs for e in events if e.task == "train" and e.kind == "task_finished"] == \
        [{"version": "v-1"}]


def test_the_demo_pins_week_1_then_week_2_and_shows_the_data_diff(tmp_path, capfd):
    """The demo's data steps as it plays them (`Demo.pin_week`): the example's generator
    writes the week into the work dir's shared storage, `mlops data snapshot` pins it in
    the model repo's lock, and week 2 shows the diff the PR will carry. The dataset is
    shrunk (32 training images) to keep this in seconds; the platform is not started."""

    demo = Demo(argparse.Namespace(workdir=str(tmp_path / "w"), example="shapes-detector"))
    demo.generator_args = ["--num-train", "32", "--num-val", "4"]
    (demo.work / "tmp").mkdir(parents=True)
    demo.clone.mkdir()
    modelrepo.copy_example(demo.example_dir, demo.clone)
    demo.pin_week(1)
    lock = demo.clone / "data" / "shapes.lock"
    first = yaml.safe_load(lock.read_text())
    assert first["name"] == "shapes-detector-week-1"
    assert first["source"] == (demo.work / "datasets" / "shapes-detector" / "week-1").as_uri()
    assert [len(first["splits"][s]["images"]) for s in ("train", "val")] == [32, 4]
    capfd.readouterr()
    demo.pin_week(2)
    out = capfd.readouterr().out
    assert "**Data: shapes-detector-week-1 → shapes-detector-week-2**: +5 images, 1 removed" \
        in out
    assert "| train | 32 | 36 | +5 | -1 |" in out and "| val | 4 | 4 | +0 | -0 |" in out
    second = yaml.safe_load(lock.read_text())
    assert second["splits"]["val"] == first["splits"]["val"]  # val unchanged, byte for byte
    # the push carries the pin (the example's .gitignore keeps generated data out, not it)
    subprocess.run(["git", "init", "-q", str(demo.clone)], check=True)
    subprocess.run(["git", "-C", str(demo.clone), "add", "-A"], check=True)
    tracked = subprocess.run(["git", "-C", str(demo.clone), "ls-files"], check=True,
                             capture_output=True, text=True).stdout.split()
    assert "data/shapes.lock" in tracked


def test_the_demos_children_cache_their_bytecode_in_the_work_dir(tmp_path, monkeypatch):
    """Under PYTHONDONTWRITEBYTECODE (common in CI and containers), the demo's children still
    write bytecode, into the work dir's cache the prefix names, and the next child reads it:
    with the prefix set and writing off, every rank, launcher and server compiled paddle from
    source (4-4.8 CPU-s an import instead of 1.0-1.4)."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    demo = Demo(argparse.Namespace(workdir=str(tmp_path / "w"), example="shapes-detector"))
    env = demo.env()
    prefix = pathlib.Path(env["PYTHONPYCACHEPREFIX"])
    assert prefix.is_relative_to(demo.work)
    subprocess.run([sys.executable, "-c", "import yaml"], env=env, check=True, timeout=60)
    assert list(prefix.rglob("yaml/__init__.*.pyc"))  # the prefix mirrors the source's path


def test_the_load_plays_the_val_images_prepare_data_laid_out(tmp_path):
    """With pins the checkout holds no images: the demo's load reads the val split from
    the run's prepared data (an example without pins: from its checkout's data/val)."""

    (tmp_path / "sha1" / "out" / "data" / "images" / "val").mkdir(parents=True)
    assert _val_images(tmp_path) == tmp_path / "sha1" / "out" / "data" / "images" / "val"
    other = tmp_path / "old"
    (other / "sha2" / "repo" / "data" / "val").mkdir(parents=True)
    assert _val_images(other) == other / "sha2" / "repo" / "data" / "val"


def test_the_summary_fails_a_refusal_that_does_not_name_the_expected_classes(tmp_path, capsys):
    """bad-labels must be stopped at the gate *naming* circle and square: a refusal that
    names only one of them is reported as a problem (the demo then exits non-zero)."""
    demo = Demo(argparse.Namespace(workdir=str(tmp_path / "w"), example="shapes-detector",
                                   keep_running=False))
    demo.work.mkdir(parents=True)

    def refused(sha, named):
        return {"scenario": "bad-labels", "message": "data: week 3 arrives", "commit": sha,
                "version": f"v-{sha}", "map50": 0.89, "expect": "gate_refused",
                "outcome": "gate_refused", "reason": "FAIL", "worse_classes": named,
                "expect_classes": ["circle", "square"], "marks": {"push": 0.0, "run_done": 1.0},
                "run_report": "-"}
    demo.results = [refused("a", ["circle", "square"]), refused("b", ["square"])]
    assert demo.summarise() == [
        "bad-labels: gate_refused, expected gate_refused naming circle as worse"]
    assert "ok bad-labels v-a" in capsys.readouterr().out
