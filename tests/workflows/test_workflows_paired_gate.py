"""Champion vs challenger on the same images, through the evaluate and gate steps (issue 30).

Production is the session's trained example (tests/fixtures/training.py),
proposed into a real bare GitOps repo by `propose`, so its Deployment's
model-uri points at a real export. The candidates are copies of that export:
the same weights (so the paired difference is exactly zero), and the same
weights with the serving-side mistake `train.py --drill-skew no-scale`
writes into `infer_cfg.yml` (pixels not divided by 255), which the
training code's own `bbox.json` cannot show and the served export does. No
training runs here: a candidate trained on bad labels, refused with the classes
named, is the demo's `bad-labels` scenario (tests/demo/test_demo_e2e.py reads its
verdict and report).
"""

import json
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

from gitops.forges.local import LocalForge
from gitops.repo import init_repo
from local.argo.runner import run_workflow
from mlops.cli import main as cli
from promotion.decision.policy import load_policy
from promotion.gitrepo.propose import propose
from promotion.reports.report import evaluation_report
from tests.fixtures.training import (
    copy_example,
    training_env,
    unpin,
)
from workflows.config import load_config
from workflows.pipeline import build_workflow_template
from workflows.settings import load_settings

pytestmark = pytest.mark.usefixtures("trained_model")


@pytest.fixture(scope="module")
def production(trained_model, tmp_path_factory):
    """A GitOps repo whose stable version is the trained export."""
    root = tmp_path_factory.mktemp("production")
    gitops = root / "gitops.git"
    init_repo(gitops)
    published = root / "models" / "v1"
    shutil.copytree(trained_model.model_dir, published)
    result = propose(published, str(gitops), LocalForge(gitops), load_policy({}), approval="auto")
    assert result.merged
    return gitops, result.version


def _candidate(tmp_path, trained_model, skew: bool = False) -> tuple[pathlib.Path, pathlib.Path]:
    """A model repo (floor 0.2: the small model scores ~0.3) and a run's output folder."""
    repo = copy_example(tmp_path / "repo")
    (repo / "data").symlink_to(trained_model.data_dir)
    cfg = yaml.safe_load((unpin(repo) / "mlops.yaml").read_text())
    cfg["gate"]["min"] = 0.2
    (repo / "mlops.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    shutil.copytree(trained_model.output_dir, out / "full",
                    ignore=shutil.ignore_patterns("launch-logs"))
    if skew:  # what train.py --drill-skew no-scale exports: scale 1 instead of 1/255
        infer_cfg = out / "full" / "model" / "infer_cfg.yml"
        doc = yaml.safe_load(infer_cfg.read_text())
        doc["input"]["scale"] = 1.0
        infer_cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    return repo, out


def _steps(repo, out, gitops) -> tuple[dict, dict]:
    where = ["--repo", str(repo), "--out", str(out), "--production-from-gitops", str(gitops)]
    assert cli(["step", "evaluate", *where]) == 0
    assert cli(["step", "gate", *where]) == 0
    outputs = {p.name: p.read_text() for p in (out / "outputs").iterdir()}
    return outputs, json.loads((out / "full" / "gate.json").read_text())


def test_the_same_export_as_production_is_the_same_within_noise(production, trained_model,
                                                                tmp_path):
    gitops, version = production
    repo, out = _candidate(tmp_path, trained_model)

    outputs, gate = _steps(repo, out, gitops)
    assert outputs["passed"] == "true"
    assert gate["production_version"] == version
    # the same weights on the same images: every resample's difference is 0
    assert gate["difference"] == {"estimate": 0.0, "low": 0.0, "high": 0.0, "mc_error": 0.0}
    assert gate["outcome"] == "pass" and outputs["outcome"] == "pass"
    assert ("non-inferior by margin 0.0100: shown (+0.0000 [+0.0000, +0.0000])"
            in gate["reason"])
    assert "on the same 200 images" in gate["reason"]
    # the served candidate's numbers are the ones the training code's bbox.json gives
    metrics = json.loads((out / "full" / "metrics.json").read_text())
    assert metrics["source"] == "served export"
    own = json.loads((out / "full" / "paired.json").read_text())["sets"][0]
    assert metrics["map50"] == pytest.approx(own["paired"]["candidate"]["map50"]["estimate"])
    # the pictures exist as PNGs and the PR body links them, with the per-class table
    pictures = gate["sets"][0]["pictures"]
    for path in pictures.values():
        assert pathlib.Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record = yaml.safe_load((out / "full" / "model" / "model.yaml").read_text())
    body = evaluation_report(record, {"version": version}, gate=gate)
    assert "### Same images: candidate vs production" in body
    assert "| circle |" in body and "| square |" in body and "| triangle |" in body
    assert pathlib.Path(pictures["disagreements"]).as_uri() in body


def test_a_serving_side_mistake_is_stopped_at_the_gate(production, trained_model, tmp_path):
    """The export's infer_cfg.yml feeds 0..255 pixels; bbox.json (training's own
    preprocessing) is unchanged, so only evaluating the export sees it."""
    gitops, version = production
    repo, out = _candidate(tmp_path, trained_model, skew=True)

    outputs, gate = _steps(repo, out, gitops)
    assert outputs["passed"] == "false"
    assert gate["verdict"].startswith("worse beyond the margin 0.0100: shown")
    assert gate["difference"]["high"] < -0.01 and outputs["outcome"] == "fail"
    assert gate["worse_classes"], gate["reason"]  # named, with their intervals
    for name in gate["worse_classes"]:
        assert f"{name} on val -" in gate["reason"]
    # the disagreement grid shows the images where the two differ most
    ranked = json.loads((out / "full" / "paired.json").read_text())["sets"][0]
    assert ranked["most_disagreement"][0]["disagreement"] > 0


def test_without_production_the_candidate_is_judged_alone(trained_model, tmp_path):
    gitops = tmp_path / "gitops.git"
    init_repo(gitops)
    repo, out = _candidate(tmp_path, trained_model)

    outputs, gate = _steps(repo, out, gitops)
    assert outputs["passed"] == "true"
    assert "no production model to compare with" in gate["reason"]
    assert not (out / "full" / "paired.json").exists()
    assert "sets" not in gate


def test_a_holdout_that_does_not_exist_is_named(production, trained_model, tmp_path, capsys):
    gitops, _ = production
    repo, out = _candidate(tmp_path, trained_model)
    missing = tmp_path / "holdout.json"
    code = cli(["step", "evaluate", "--repo", str(repo), "--out", str(out),
                "--production-from-gitops", str(gitops), "--holdout", str(missing)])
    err = capsys.readouterr().err
    assert code == 2 and f"--holdout {missing}: not found" in err and "Traceback" not in err


def _pinned_store(clean: pathlib.Path, root: pathlib.Path, n: int = 16) -> pathlib.Path:
    """The session's dataset as a store `mlops data snapshot` pins, `n` images a split: train,
    val, and a holdout of train images the train split leaves out."""
    train = json.loads((clean / "train.json").read_text())
    val = json.loads((clean / "val.json").read_text())
    (root / "annotations").mkdir(parents=True)
    for split, coco, start in (("train", train, 0), ("val", val, 0), ("holdout", train, n)):
        images = coco["images"][start:start + n]
        ids = {i["id"] for i in images}
        for entry in images:
            (root / "images" / entry["file_name"]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(clean / entry["file_name"], root / "images" / entry["file_name"])
        (root / "annotations" / f"{split}.json").write_text(json.dumps(
            {**coco, "images": images,
             "annotations": [a for a in coco["annotations"] if a["image_id"] in ids]}))
    return root


def test_the_pinned_holdout_is_compared_on_too(production, trained_model, tmp_path,
                                               monkeypatch, capsys):
    """`mlops.yaml` pins `data.holdout` (issue 29): after prepare-data, evaluate compares
    champion and challenger on the prepared holdout as well as on val, and the gate judges
    both; a `--holdout` flag beside the pin is refused, naming both."""
    gitops, version = production
    repo, out = _candidate(tmp_path, trained_model)
    (repo / "data").unlink()
    store = _pinned_store(trained_model.data_dir, tmp_path / "store")
    lock = "data/shapes.lock"
    cfg = yaml.safe_load((repo / "mlops.yaml").read_text())
    cfg["evaluation"].pop("annotations")
    cfg["data"] = {"train": lock, "val": lock, "holdout": lock,
                   "labels": ["circle", "square", "triangle"]}
    (repo / "mlops.yaml").write_text(yaml.safe_dump(cfg))
    (repo / "data").mkdir()
    assert cli(["data", "snapshot", str(store), "--name", "held", "--out", str(repo / lock)]) == 0
    monkeypatch.setenv("MLOPS_DATA_CACHE", str(tmp_path / "cache"))
    assert cli(["step", "prepare-data", "--repo", str(repo), "--out", str(out)]) == 0

    outputs, gate = _steps(repo, out, gitops)
    assert outputs["passed"] == "true" and gate["production_version"] == version
    assert [(s["set"], s["images"]) for s in gate["sets"]] == [("val", 16), ("holdout", 16)]
    assert gate["reason"].startswith("PASS: ")
    assert "on the same 32 images (val 16 + holdout 16)" in gate["reason"]
    paired = json.loads((out / "full" / "paired.json").read_text())
    assert paired["sets"][1]["annotations"] == str(out / "data" / "annotations" / "holdout.json")

    capsys.readouterr()
    flag = str(trained_model.data_dir / "val.json")
    code = cli(["step", "evaluate", "--repo", str(repo), "--out", str(out),
                "--production-from-gitops", str(gitops), "--holdout", flag])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert (f"--holdout {flag}: mlops.yaml pins data.holdout "
            f"({out / 'data' / 'annotations' / 'holdout.json'} once prepared)") in err


def test_init_from_production_renders_a_find_production_step_feeding_the_full_job(tmp_path):
    """Rendering only: the full PaddleJob gets `--init-from` before the template's args (so a
    job's own `init-from: ""` wins) and the models volume read-only; smoke stays as it was."""
    repo = copy_example(tmp_path / "repo")
    cfg = yaml.safe_load((repo / "mlops.yaml").read_text())
    cfg["training"]["init_from"] = "production"
    cfg["training"]["full"]["overrides"]["args"] = {"epochs": 2}
    (repo / "mlops.yaml").write_text(yaml.safe_dump(cfg))
    doc = build_workflow_template(load_config(repo), load_settings()).to_dict()
    templates = {t["name"]: t for t in doc["spec"]["templates"]}
    tasks = {t["name"]: t for t in templates["pipeline"]["dag"]["tasks"]}
    assert tasks["train"]["depends"] == "smoke-train && find-production"
    assert {"name": "init-from",
            "value": "{{tasks.find-production.outputs.parameters.model-dir}}"} in tasks[
        "train"]["arguments"]["parameters"]
    assert templates["find-production"]["container"]["args"][:2] == ["step", "find-production"]

    def worker(name):
        job = yaml.safe_load(templates[name]["resource"]["manifest"])
        return job["spec"]["worker"]["template"]["spec"]
    full = worker("train")
    args = full["containers"][0]["args"]
    assert args[args.index("--init-from") + 1] == "{{inputs.parameters.init-from}}"
    assert args.index("--init-from") < args.index("--epochs")
    assert {"name": "models", "mountPath": "/models/shapes-detector", "readOnly": True,
            "subPath": "shapes-detector"} in full["containers"][0]["volumeMounts"]
    assert "--init-from" not in worker("smoke-train")["containers"][0]["args"]
    cfg["training"].pop("init_from")
    (repo / "mlops.yaml").write_text(yaml.safe_dump(cfg))
    plain = build_workflow_template(load_config(repo), load_settings()).to_dict()
    assert "find-production" not in {t["name"] for t in plain["spec"]["templates"]}


def test_find_production_names_what_it_starts_from(production, tmp_path, capsys):
    gitops, version = production
    repo = copy_example(tmp_path / "repo")
    out = tmp_path / "out"
    assert cli(["step", "find-production", "--repo", str(repo), "--out", str(out),
                "--production-from-gitops", str(gitops)]) == 0
    model_dir = (out / "outputs" / "model-dir").read_text()
    assert (pathlib.Path(model_dir) / "inference.pdiparams").is_file()
    assert (out / "outputs" / "version").read_text() == version
    assert cli(["step", "find-production", "--repo", str(repo), "--out", str(out)]) == 0
    assert (out / "outputs" / "model-dir").read_text() == ""
    assert "training from scratch" in capsys.readouterr().out


def test_train_py_refuses_an_init_from_that_is_not_an_export(trained_model, tmp_path):
    proc = subprocess.run(
        [sys.executable, "train.py", "--output-dir", str(tmp_path / "o"), "--checkpoint-dir",
         str(tmp_path / "c"), "--data-dir", str(trained_model.data_dir), "--subset", "32",
         "--batch-size", "16", "--init-from", str(tmp_path)],
        cwd=trained_model.repo_dir, env=training_env(), capture_output=True, text=True,
        timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"--init-from {tmp_path}: no inference.pdiparams (not an export)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_zero_epochs_from_scratch_is_refused(trained_model, tmp_path):
    """From scratch, 0 epochs would export random weights: refused. (0 epochs from an
    export, which re-exports its weights unchanged under a version of its own, runs
    through the pipeline below: test_an_export_only_push_runs_one_worker_and_no_smoke_job.)"""
    scratch = subprocess.run(
        [sys.executable, "train.py", "--output-dir", str(tmp_path / "s"), "--checkpoint-dir",
         str(tmp_path / "sc"), "--data-dir", str(trained_model.data_dir), "--epochs", "0"],
        cwd=trained_model.repo_dir, env=training_env(), capture_output=True, text=True,
        timeout=300)
    assert scratch.returncode == 2
    assert "error: --epochs must be >= 1 (or 0 with --init-from), got 0" in scratch.stderr
    assert "Traceback" not in scratch.stderr


def test_an_export_only_push_runs_one_worker_and_no_smoke_job(production, trained_model,
                                                             small_shapes_dataset, tmp_path):
    """The demo's drill push through the local runner: `epochs: 0` from production with a
    serving flag. No smoke PaddleJob is rendered or run, the full PaddleJob runs one worker
    (the example asks two), its export is production's weights with the drill declared,
    and every task of the run succeeded (propose included: it is a version of its own).
    On the 8 val images of the small dataset (the gate reads no score here, only that the
    same weights score the same), so the export and the comparison take seconds. Its
    training images are left out: a run of no step opens none (`modelkit.datasets`)."""
    gitops, version = production
    repo = copy_example(tmp_path / "repo")
    (repo / "data").mkdir()
    for name in ("train.json", "val.json", "DATASET.json"):
        shutil.copyfile(small_shapes_dataset / name, repo / "data" / name)
    (repo / "data" / "val").symlink_to(small_shapes_dataset / "val")
    cfg = yaml.safe_load((unpin(repo) / "mlops.yaml").read_text())
    cfg["gate"]["min"] = 0.0
    assert cfg["training"]["init_from"] == "production"
    cfg["training"]["full"]["overrides"]["args"] = {  # the drill
        "epochs": 0, "drill-delay-ms": 250, "subset": 32, "batch-size": 16}
    (repo / "mlops.yaml").write_text(yaml.safe_dump(cfg))
    out, lines = tmp_path / "run", []
    result = run_workflow(build_workflow_template(load_config(repo), load_settings()), repo, out,
                          parameters={"gitops-repo": str(gitops)}, echo=lines.append)

    run = json.loads((out / "run.json").read_text())
    phases = {t["name"]: t["phase"] for t in run["tasks"]}
    assert result.status == run["status"] == "Succeeded", "\n".join(lines)
    assert "smoke-train" not in phases and set(phases.values()) == {"Succeeded"}, phases
    assert [*phases] == ["checkout", "build-image", "push-image", "find-production", "train",
                         "evaluate", "gate", "publish-model", "propose", "record-outcome"]
    assert not (out / "smoke").exists()
    assert any("smoke-train: skipped: the full job trains no step (epochs: 0)" in line
               for line in lines), lines
    assert any("train-workers: 1 (training.full asks 2)" in line for line in lines), lines
    train_log = (out / "logs" / "train.log").read_text()
    assert "1 worker(s)" in train_log and "[worker-1] " not in train_log
    assert "total_steps=0" in train_log
    assert sorted(p.name for p in (out / "full" / "launch-logs").iterdir()) == ["worker-0"]

    prod = trained_model.model_dir
    record = yaml.safe_load((out / "full" / "model" / "model.yaml").read_text())
    start = yaml.safe_load((prod / "model.yaml").read_text())
    assert record["weights_sha256"] == start["weights_sha256"]  # production's weights
    assert ((out / "full" / "rank-0.sha256").read_text() ==
            (trained_model.output_dir / "rank-0.sha256").read_text())
    assert (out / "full" / "model" / "inference.pdiparams").read_bytes() == (
        prod / "inference.pdiparams").read_bytes()
    assert (record["hyperparameters"]["steps"], record["hyperparameters"]["workers"]) == (0, 1)
    fault = {"delay_ms": 250.0, "error_rate": 0.0, "error_status": 500}
    assert record["drill"] == fault and record["version"] != version
    served = yaml.safe_load((out / "full" / "model" / "infer_cfg.yml").read_text())
    assert served == dict(yaml.safe_load((prod / "infer_cfg.yml").read_text()), fault=fault)
    gate = json.loads((out / "full" / "gate.json").read_text())
    assert gate["passed"] and gate["difference"] == {"estimate": 0.0, "low": 0.0, "high": 0.0,
                                                     "mc_error": 0.0}
