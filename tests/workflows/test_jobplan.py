"""No smoke job where it cannot catch anything, and one worker for an export-only job.

The decisions (`workflows.jobplan`) are tested on their own on configs loaded as a push
loads them; the rendering tests check the example's pipeline in both DAG shapes is
still schema-valid Argo, lints (`mlops workflows lint`: schemas, embedded PaddleJobs,
identities and RBAC) and gives the local runner a DAG it can order. Argo resolves a
`depends` only against tasks of the same DAG (argoproj/argo-workflows v3.7.9
workflow/controller/dag.go, `assessDAGPhase`/`evaluateDependsLogic`), so train must not
name an absent smoke-train: `dag_tasks` refuses exactly that.
"""

import pathlib

import pytest
import yaml

from local.argo.runner import dag_tasks
from mlops.cli import main as cli
from tests.fixtures.training import copy_example
from tests.manifest_validation import validate_manifest
from workflows.config import load_config
from workflows.identity import identity_problems
from workflows.jobplan import (
    SMOKE_ANNOTATION,
    WORKERS_ANNOTATION,
    full_job,
    plan_annotations,
    smoke_needed,
)
from workflows.render import render_documents
from workflows.settings import load_settings


def _loaded(tmp_path: pathlib.Path, full: dict, smoke: dict | None = None, workers: int = 2):
    """The example's config with these full (and smoke) overrides, loaded as a push is."""
    repo = tmp_path / "repo"
    if not repo.exists():
        copy_example(repo)
    cfg = yaml.safe_load((repo / "mlops.yaml").read_text())
    cfg["training"]["full"]["overrides"] = {"workers": workers, **full}
    cfg["training"]["smoke"]["overrides"] = smoke or {}
    (repo / "mlops.yaml").write_text(yaml.safe_dump(cfg))
    return load_config(repo)


@pytest.mark.parametrize("full, smoke, needed, why", [
    ({"args": {"epochs": 0}}, {}, False, "trains no step (epochs: 0)"),
    ({"args": {"epochs": "0", "max-steps": 500}}, {}, False, "trains no step (epochs: 0)"),
    ({"args": {"max-steps": 10}}, {}, False, "max-steps 10 is at most the smoke job's 20"),
    ({"args": {"max-steps": 20}}, {}, False, "max-steps 20 is at most the smoke job's 20"),
    ({"args": {"max_steps": 20}}, {}, False, "max-steps 20 is at most"),  # the same flag
    ({"args": {"max-steps": 40}}, {}, True, "max-steps 40 is more than the smoke job's 20"),
    ({"args": {"max-steps": 40}}, {"args": {"max-steps": 50}}, False, "at most the smoke job's 50"),
    ({}, {}, True, "the full job has no step cap"),
    ({"args": {"epochs": 3}}, {}, True, "the full job has no step cap"),
    ({"args": {"max-steps": 0}}, {}, True, "no step cap"),  # the kit's 0: no cap
    ({"args": {"max-steps": "ten"}}, {}, True, "no step cap"),  # unreadable: keep the smoke
    ({"args": {"max-steps": 10}}, {"args": {"max-steps": 0}}, True, "the smoke job has no step"),
])
def test_the_smoke_job_runs_only_where_it_can_fail_first(tmp_path, full, smoke, needed, why):
    got, reason = smoke_needed(_loaded(tmp_path, full, smoke))
    assert got is needed and why in reason, reason
    assert reason.startswith("runs: " if needed else "skipped: ")


def test_an_export_only_job_is_one_worker_whatever_workers_says(tmp_path):
    job, why = full_job(_loaded(tmp_path, {"args": {"epochs": 0}}, workers=4))
    assert job.workers == 1 and why.startswith("1 (training.full asks 4): ")
    assert "no collective to form" in why
    for full in ({"args": {"epochs": 1}}, {"args": {"max-steps": 10}}, {}):
        job, why = full_job(_loaded(tmp_path, full, workers=4))
        assert (job.workers, why) == (4, "4 (training.full)")


def test_only_a_changed_dag_carries_its_reasons(tmp_path):
    assert plan_annotations(_loaded(tmp_path, {})) == {}
    assert list(plan_annotations(_loaded(tmp_path, {"args": {"max-steps": 10}}))) == [
        SMOKE_ANNOTATION]
    assert list(plan_annotations(_loaded(tmp_path, {"args": {"epochs": 0}}))) == [
        SMOKE_ANNOTATION, WORKERS_ANNOTATION]
    assert list(plan_annotations(_loaded(tmp_path, {"args": {"epochs": 0}}, workers=1))) == [
        SMOKE_ANNOTATION]


@pytest.mark.parametrize("args, smoke, replicas", [
    ({"epochs": 0}, False, 1),
    ({"max-steps": 10}, False, 2),  # the demo's low-map push
    ({"max-steps": 20}, False, 2),
    ({"max-steps": 40}, True, 2),
    ({}, True, 2),
])
def test_the_rendered_dag_in_both_shapes_is_valid_argo(tmp_path, capsys, args, smoke, replicas):
    loaded = _loaded(tmp_path, {"args": args})
    docs = render_documents(loaded, load_settings())
    for file_docs in docs.values():
        for doc in file_docs:
            validate_manifest(doc)
    (wt,) = docs["workflowtemplate.yaml"]
    templates = {t["name"]: t for t in wt["spec"]["templates"]}
    tasks = {t["name"]: t for t in templates["pipeline"]["dag"]["tasks"]}
    assert ("smoke-train" in tasks, "smoke-train" in templates) == (smoke, smoke)
    before = "smoke-train" if smoke else "push-image && prepare-data"
    assert tasks["train"]["depends"] == f"{before} && find-production"
    assert [t["name"] for t in dag_tasks(wt)].index("train") > 0  # every depends is known
    job = yaml.safe_load(templates["train"]["resource"]["manifest"])
    assert job["spec"]["worker"]["replicas"] == replicas
    annotations = wt["metadata"]["annotations"]
    assert (SMOKE_ANNOTATION in annotations) is not smoke
    assert (WORKERS_ANNOTATION in annotations) is (replicas == 1)
    assert identity_problems([d for file_docs in docs.values() for d in file_docs]) == []
    out = tmp_path / "manifests"
    assert cli(["workflows", "render", str(loaded.repo_dir), "--out", str(out)]) == 0
    assert cli(["workflows", "lint", str(out)]) == 0
    assert ": valid" in capsys.readouterr().out
