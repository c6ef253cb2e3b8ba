"""Propose against real bare repositories with the local forge (a PR is a branch + record).

The model directories hold a `model.yaml` and a weights file whose digest is
checked; no Paddle program is needed because proposing never loads the model.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

from contracts.artifact import WeightsMismatch
from gitops.forges.local import LocalForge
from gitops.repo import init_repo
from promotion.decision.policy import load_policy
from promotion.errors import ProposeError
from promotion.gitrepo.propose import branch_name, propose
from promotion.reports.report import evaluation_report
from tests.fixtures.promotion_controller import git
from tests.manifest_validation import validate_manifest

MODEL = "shapes"


def _model_dir(root: pathlib.Path, version: str, map50: float) -> pathlib.Path:
    folder = root / f"model-{version}"
    folder.mkdir()
    (folder / "inference.pdiparams").write_bytes(version.encode() * 64)
    (folder / "model.yaml").write_text(yaml.safe_dump({
        "name": MODEL, "version": version,
        "weights_sha256": hashlib.sha256(version.encode() * 64).hexdigest(),
        "training_commit": f"commit-{version}", "workflow_id": f"wf-{version}",
        "dataset_digest": "d" * 64, "hyperparameters": {"epochs": 3},
        "metrics": {"map50": map50, "map": map50 - 0.3, "map75": map50 - 0.2},
    }))
    return folder


@pytest.fixture
def repo(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "gitops.git"
    init_repo(path)
    return path


def _files(repo: pathlib.Path, rev: str) -> list[str]:
    return git(repo, "ls-tree", "--name-only", f"{rev}:apps/{MODEL}").split()


def _doc(repo: pathlib.Path, rev: str, name: str) -> dict:
    return yaml.safe_load(git(repo, "show", f"{rev}:apps/{MODEL}/{name}"))


def test_first_model_is_proposed_as_stable_and_auto_merged(repo, tmp_path):
    v1 = _model_dir(tmp_path, "v1", 0.90)
    result = propose(v1, str(repo), LocalForge(repo), load_policy({}), approval="auto")
    assert (result.bootstrap, result.merged, result.branch) == (
        True,
        True,
        branch_name(MODEL, "v1"),
    )

    assert _files(repo, "main") == ["canary-policy.yaml", "deployment-v1.yaml",
                                    "destinationrule.yaml", "kustomization.yaml",
                                    "promotion.yaml", "service.yaml", "virtualservice.yaml"]
    dep = _doc(repo, "main", "deployment-v1.yaml")
    assert dep["metadata"]["annotations"]["mlops.paddle.org/model-uri"] == v1.resolve().as_uri()
    assert dep["metadata"]["annotations"]["mlops.paddle.org/weights-sha256"] == \
        hashlib.sha256(b"v1" * 64).hexdigest()
    vs = _doc(repo, "main", "virtualservice.yaml")
    assert [(r["destination"]["subset"], r["weight"]) for r in vs["spec"]["http"][0]["route"]] \
        == [("stable", 100)]
    state = _doc(repo, "main", "promotion.yaml")
    assert (state["phase"], state["stable"], state["candidate"]) == ("idle", "v1", None)
    for name in ("deployment-v1.yaml", "service.yaml", "destinationrule.yaml",
                 "virtualservice.yaml"):
        validate_manifest(_doc(repo, "main", name))


def test_candidate_is_proposed_as_a_canary_once(repo, tmp_path):
    forge = LocalForge(repo)
    propose(_model_dir(tmp_path, "v1", 0.90), str(repo), forge, load_policy({}), approval="auto")
    main_before = git(repo, "rev-parse", "main").strip()
    v2 = _model_dir(tmp_path, "v2", 0.93)

    first = propose(v2, str(repo), forge, load_policy({"steps": [5, 50, 100]}))
    assert (first.bootstrap, first.merged, first.status) == (False, False, "opened")
    branch = first.branch
    tip = git(repo, "rev-parse", branch).strip()
    assert git(repo, "rev-parse", "main").strip() == main_before  # approval: pr waits

    files = _files(repo, branch)
    assert "deployment-v1.yaml" in files and "deployment-v2.yaml" in files
    vs = _doc(repo, branch, "virtualservice.yaml")
    # Merged at 0 %: no traffic to a subset whose pods may not be ready (Istio would 503).
    assert [(r["destination"]["subset"], r["weight"]) for r in vs["spec"]["http"][0]["route"]] \
        == [("stable", 100), ("canary", 0)]
    dr = _doc(repo, branch, "destinationrule.yaml")
    assert [(s["name"], s["labels"]["version"]) for s in dr["spec"]["subsets"]] == \
        [("stable", "v1"), ("canary", "v2")]
    state = _doc(repo, branch, "promotion.yaml")
    assert (state["phase"], state["stable"], state["candidate"], state["weight"]) == \
        ("waiting", "v1", "v2", 0)
    assert state["started_at"] is None  # the clock starts when the candidate is ready
    assert _doc(repo, branch, "canary-policy.yaml")["steps"] == [5, 50, 100]
    validate_manifest(vs)
    validate_manifest(dr)

    pr = forge.get_pr(first.pr_number)
    assert pr.state == "open" and pr.branch == branch
    assert "| mAP@0.5 | 0.9300 | 0.9000 | +0.0300 |" in pr.body  # production found via its URI
    assert "`commit-v2`" in pr.body and "`wf-v2`" in pr.body
    assert hashlib.sha256(b"v2" * 64).hexdigest() in pr.body

    again = propose(v2, str(repo), forge, load_policy({"steps": [5, 50, 100]}))
    assert (again.pr_number, again.branch, again.status) == (first.pr_number, branch, "unchanged")
    assert git(repo, "rev-parse", branch).strip() == tip
    assert len(forge.list_prs(None)) == 2


def test_a_second_candidate_waits_for_the_running_canary(repo, tmp_path):
    forge = LocalForge(repo)
    policy = load_policy({})
    propose(_model_dir(tmp_path, "v1", 0.90), str(repo), forge, policy, approval="auto")
    propose(_model_dir(tmp_path, "v2", 0.91), str(repo), forge, policy, approval="auto")
    assert _doc(repo, "main", "promotion.yaml")["phase"] == "waiting"  # a canary in flight
    with pytest.raises(ProposeError, match="canary of v2 is in progress"):
        propose(_model_dir(tmp_path, "v3", 0.92), str(repo), forge, policy)


def test_weights_changed_after_evaluation_are_refused(repo, tmp_path):
    v1 = _model_dir(tmp_path, "v1", 0.90)
    (v1 / "inference.pdiparams").write_bytes(b"tampered")
    with pytest.raises(WeightsMismatch, match="not the evaluated weights_sha256") as raised:
        propose(v1, str(repo), LocalForge(repo), load_policy({}))
    assert raised.value.exit_code == 5  # digest mismatch, distinct from bad input
    assert "mlops/propose" not in git(repo, "branch", "--list")


def test_evaluation_report_text():
    record = {"name": "m", "version": "v2", "weights_sha256": "ab" * 32, "training_commit": "c1",
              "workflow_id": "wf", "dataset_digest": "dd", "metrics": {"map50": 0.75, "map": 0.5}}
    text = evaluation_report(record, {"version": "v1", "metrics": {"map50": 0.7}},
                             gate={"passed": True, "reason": "PASS: fine"}, steps=(10, 100))
    assert text.splitlines()[0] == "## Promote `m` `v2`"
    assert "| mAP@0.5 | 0.7500 | 0.7000 | +0.0500 |" in text
    assert "| mAP@[.5:.95] | 0.5000 | – | – |" in text
    assert "✅ passed: PASS: fine" in text
    assert "| training commit | `c1` | – |" in text
    assert "10 % → 100 %" in text


def test_evaluation_report_prints_counts_as_integers():
    record = {"name": "m", "version": "v2", "metrics": {"map50": 0.75, "images": 200}}
    text = evaluation_report(record, {"version": "v1", "metrics": {"map50": 0.7, "images": 180}},
                             steps=(10, 100))
    assert "| images | 200 | 180 | +20 |" in text


def test_a_real_proposal_prints_counts_as_integers(repo, tmp_path):
    """Issue 12: a real run's PR printed `detections | 8000.0000 | 8000.0000 | +0.0000`:
    the production side came back through the Deployment's metrics annotation as float."""
    forge = LocalForge(repo)
    folders = []
    for version in ("v1", "v2"):
        folder = _model_dir(tmp_path, version, 0.9)
        record = yaml.safe_load((folder / "model.yaml").read_text())
        record["metrics"]["detections"] = 8000
        (folder / "model.yaml").write_text(yaml.safe_dump(record))
        folders.append(folder)
    propose(folders[0], str(repo), forge, load_policy({}), approval="auto")
    shutil.rmtree(folders[0])  # production's metrics from the annotation, not its model.yaml
    opened = propose(folders[1], str(repo), forge, load_policy({}))
    body = forge.get_pr(opened.pr_number).body
    assert "| detections | 8000 | 8000 | +0 |" in body, body


def test_the_pipelines_propose_command_keeps_counts_integers(repo, tmp_path):
    """The pipeline proposes through `mlops promote propose --metrics metrics.json` (the
    evaluate step's file); the CLI used to float() every value on the way in."""
    folder = _model_dir(tmp_path, "v1", 0.9)
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"metrics": {"map50": 0.9, "detections": 8000,
                                               "usable": True}}))
    proc = subprocess.run([sys.executable, "-m", "mlops", "promote", "propose", str(folder),
                           "--gitops", str(repo), "--metrics", str(metrics)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    body = LocalForge(repo).get_pr(1).body
    assert "| detections | 8000 |" in body and "8000.0" not in body, body
    assert "usable" not in body  # a flag is not a metric


def test_cli_reports_a_missing_model_yaml_without_traceback(repo, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mlops", "promote", "propose",
                           str(tmp_path / "nothing"), "--gitops", str(repo)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "model.yaml: not found" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_versions_serving_section_reaches_its_deployment(repo, tmp_path):
    """infer_cfg.yml `serving:` (workers, batching) becomes the Deployment's serve flags, which
    the local platform and a cluster both run; a misspelt key is refused before any commit."""
    v1 = _model_dir(tmp_path, "v1", 0.90)
    (v1 / "infer_cfg.yml").write_text(yaml.safe_dump(
        {"serving": {"workers": 2, "batch_max_size": 4}}))
    propose(v1, str(repo), LocalForge(repo), load_policy({}), approval="auto")
    container = _doc(repo, "main", "deployment-v1.yaml")["spec"]["template"]["spec"][
        "containers"][0]
    args = container["args"]
    assert args[args.index("--workers") + 1] == "2"
    assert args[args.index("--batch-max-size") + 1] == "4"
    assert container["resources"]["requests"]["cpu"] == "2"

    v2 = _model_dir(tmp_path, "v2", 0.95)
    (v2 / "infer_cfg.yml").write_text(yaml.safe_dump({"serving": {"worker": 2}}))
    with pytest.raises(ProposeError, match="worker"):
        propose(v2, str(repo), LocalForge(repo), load_policy({}), approval="auto")


def test_an_inconclusive_gate_opens_a_pr_marked_for_review_that_auto_approval_leaves_open(
        repo, tmp_path):
    """`gate.inconclusive: review`: the candidate is proposed all the same, for a human; the
    title and the body say so, and `approval: auto` does not merge it."""
    from promotion.gitrepo.propose import REVIEW_TITLE

    forge = LocalForge(repo)
    propose(_model_dir(tmp_path, "v1", 0.90), str(repo), forge, load_policy({}), approval="auto")
    main_before = git(repo, "rev-parse", "main").strip()
    gate = {"passed": True, "outcome": "review", "comparison": "inconclusive",
            "reason": "REVIEW: ... the 400 images cannot tell (... about 1210 would give 95%)"}
    result = propose(_model_dir(tmp_path, "v2", 0.905), str(repo), forge, load_policy({}),
                     approval="auto", gate=gate)
    assert (result.merged, result.status) == (False, "opened")
    assert "not merged automatically: the gate was inconclusive" in result.message
    assert git(repo, "rev-parse", "main").strip() == main_before
    pr = forge.get_pr(result.pr_number)
    assert pr.title.endswith(REVIEW_TITLE)
    assert "⚠️ inconclusive, needs review" in pr.body
    assert "waits for a human's judgement" in pr.body
    # a gate that passed is merged as before
    passed = {**gate, "outcome": "pass", "reason": "PASS: ..."}
    merged = propose(_model_dir(tmp_path, "v3", 0.91), str(repo), forge, load_policy({}),
                     approval="auto", gate=passed)
    assert merged.merged is True
    assert not forge.get_pr(merged.pr_number).title.endswith(REVIEW_TITLE)
