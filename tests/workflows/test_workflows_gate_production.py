"""The gate compares the candidate with the model in production, read from the GitOps repo.

Production is put there by `propose` itself (real bare repo, local forge);
the candidate's metrics are written as the evaluate step writes them, so no
training runs, except in the last test, where the local runner acts out the
pipeline on the fake model repo (its stub training takes milliseconds) and
the gate task gets `--production-from-gitops` from the template's own args.
"""

import json
import pathlib

import pytest

from local.argo.runner import run_workflow
from mlops.cli import main as cli
from tests.fixtures.production import put_in_production
from tests.fixtures.workflows import make_fake_model_repo
from workflows.config import load_config
from workflows.pipeline import build_workflow_template
from workflows.settings import load_settings

MODEL = "fake-detector"  # the fake model repo's `model:`


@pytest.fixture
def candidate(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A model repo (gate: map50 >= 0.5, max_regression 0.01) and a run scoring map50 0.80."""
    repo = make_fake_model_repo(tmp_path / "repo", gate_min=0.5)
    out = tmp_path / "out"
    (out / "full").mkdir(parents=True)
    (out / "full" / "metrics.json").write_text(json.dumps({"map50": 0.80, "map": 0.55}))
    return repo, out


def _gate(repo: pathlib.Path, out: pathlib.Path, *extra: str) -> tuple[int, dict[str, str]]:
    code = cli(["step", "gate", "--repo", str(repo), "--out", str(out), *extra])
    outputs = out / "outputs"
    params = {p.name: p.read_text() for p in outputs.iterdir()} if outputs.is_dir() else {}
    return code, params


def test_a_candidate_worse_than_production_fails(candidate, empty_gitops, tmp_path):
    repo, out = candidate
    put_in_production(empty_gitops, tmp_path, MODEL, "v1", {"map50": 0.90, "map": 0.6})

    code, params = _gate(repo, out, "--production-from-gitops", str(empty_gitops))
    assert code == 0  # a failed gate is a verdict, not a crash
    assert params["passed"] == "false"
    assert "regresses from production's 0.9000 by 0.1000" in params["reason"]
    verdict = json.loads((out / "full" / "gate.json").read_text())
    assert (verdict["passed"], verdict["production"]) == (False, 0.9)


def test_a_candidate_within_max_regression_passes(candidate, empty_gitops, tmp_path):
    repo, out = candidate
    put_in_production(empty_gitops, tmp_path, MODEL, "v1", {"map50": 0.805, "map": 0.6})

    code, params = _gate(repo, out, "--production-from-gitops", str(empty_gitops))
    assert (code, params["passed"]) == (0, "true")
    assert "within 0.0100 of production's 0.8050 (change -0.0050)" in params["reason"]


def test_no_production_and_an_empty_repo_parameter_say_so(candidate, empty_gitops):
    repo, out = candidate
    for where in (str(empty_gitops), ""):  # nothing deployed yet; no repo configured
        code, params = _gate(repo, out, "--production-from-gitops", where)
        assert (code, params["passed"]) == (0, "true")
        assert "no production model to compare with" in params["reason"]


def test_an_explicit_production_file_wins(candidate, empty_gitops, tmp_path):
    repo, out = candidate
    put_in_production(empty_gitops, tmp_path, MODEL, "v1", {"map50": 0.90})
    prod = tmp_path / "prod.json"
    prod.write_text(json.dumps({"map50": 0.79}))

    code, params = _gate(repo, out, "--production", str(prod),
                         "--production-from-gitops", str(empty_gitops))
    assert (code, params["passed"]) == (0, "true")
    assert "production's 0.7900" in params["reason"]


def test_an_unreadable_gitops_repo_fails_the_step_instead_of_passing(candidate, empty_gitops,
                                                                     tmp_path, capsys):
    repo, out = candidate
    for extra in (["--production-from-gitops", str(tmp_path / "nowhere.git")],
                  ["--production-from-gitops", str(empty_gitops), "--gitops-branch", "prod"]):
        code, params = _gate(repo, out, *extra)
        printed = capsys.readouterr().err  # the same stream as every other error
        assert code == 2 and params == {}, printed
        assert printed.startswith("error: cannot read the production model") and "Traceback" \
            not in printed


def test_the_local_runner_gives_the_gate_the_gitops_repo(tmp_path, empty_gitops, monkeypatch):
    """The gate task's args in the Hera template carry the repo; the runner just runs them."""
    repo = make_fake_model_repo(tmp_path / "repo", gate_min=0.0)
    monkeypatch.setenv("FAKE_BOX_SHIFT", "12")  # IoU 0.25: map50 0, above the floor of 0
    put_in_production(empty_gitops, tmp_path, MODEL, "v1", {"map50": 0.5, "map": 0.3})
    wt = build_workflow_template(load_config(repo), load_settings())

    result = run_workflow(
        wt,
        repo,
        tmp_path / "run",
        parameters={"gitops-repo": str(empty_gitops)},
        echo=lambda _line: None,
    )
    gate = result.task("gate")
    assert gate.phase == "Succeeded" and gate.outputs["passed"] == "false"
    assert "regresses from production's 0.5000" in gate.outputs["reason"]
    assert f"production: {MODEL} v1 (metrics from annotation" in pathlib.Path(gate.log).read_text()
    assert result.task("propose").phase == "Skipped"
