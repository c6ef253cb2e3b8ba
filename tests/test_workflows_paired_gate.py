"""Champion vs challenger on the same images, through the evaluate and gate steps (issue 30).

Production is the session's trained example (tests/fixtures/training.py),
proposed into a real bare GitOps repo by `propose`, so its Deployment's
model-uri points at a real export. The candidates are copies of that export:
the same weights (so the paired difference is exactly zero), and the same
weights with the serving-side mistake `train.py --drill-skew no-scale`
writes into `infer_cfg.yml` (pixels not divided by 255), which the
training code's own `bbox.json` cannot show and the served export does. No
training runs here.
"""

import json
import pathlib
import shutil

import pytest
import yaml

from gitops.forges.local import LocalForge
from gitops.repo import init_repo
from mlops.cli import main as cli
from promotion.policy import load_policy
from promotion.propose import propose
from promotion.report import evaluation_report
from tests.fixtures.training import copy_example

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
    cfg = yaml.safe_load((repo / "mlops.yaml").read_text())
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
    assert gate["difference"] == {"estimate": 0.0, "low": 0.0, "high": 0.0}
    assert "same within noise: +0.0000 [+0.0000, +0.0000]" in gate["reason"]
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
    assert gate["verdict"].startswith("worse: ")
    assert gate["difference"]["high"] < 0
    assert "a regression of more than the allowed 0.0100 cannot be ruled out" in gate["reason"]
    assert gate["worse_classes"], gate["reason"]  # named, with their intervals
    for name in gate["worse_classes"]:
        assert f"{name} -" in gate["reason"]
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
