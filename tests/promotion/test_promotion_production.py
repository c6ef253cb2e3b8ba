"""The production reader against real bare GitOps repos, filled by `propose` itself.

Production is the stable version on main; its metrics come from the
Deployment's `mlops.paddle.org/metrics` annotation (or, for Deployments
written before it existed, from the model.yaml behind a file:// model-uri).
"""

import pathlib

import pytest
import yaml

from gitops import layout
from gitops.forges.local import LocalForge
from gitops.repo import Mirror
from gitops.writeback import Message, WriteBack
from promotion.decision.policy import load_policy
from promotion.errors import ProductionError
from promotion.gitrepo.production import production_metrics, production_of, read_production
from promotion.gitrepo.propose import propose
from serving import manifests
from tests.fixtures.production import fake_model_dir, put_in_production

MODEL = "shapes"
V1 = {"map50": 0.9, "map": 0.6, "map75": 0.7}
SHA = "ab" * 32


def _main_file(repo: pathlib.Path, path: str) -> str:
    with Mirror(repo) as mirror:
        return mirror.show(mirror.sha("main"), path)


def _commit(repo: pathlib.Path, change) -> None:
    WriteBack(repo).commit("main", change, Message("test: hand edit"))


def test_bootstrapped_v1_is_production_with_its_evaluated_metrics(empty_gitops, tmp_path):
    put_in_production(empty_gitops, tmp_path, MODEL, "v1", V1)

    found = read_production(str(empty_gitops), MODEL)
    assert (found.model, found.version, found.metrics) == (MODEL, "v1", V1)
    assert found.source == "annotation mlops.paddle.org/metrics"
    assert production_metrics(str(empty_gitops), MODEL) == V1


def test_no_model_in_the_repo_is_no_production(empty_gitops, tmp_path):
    assert read_production(str(empty_gitops), MODEL) is None
    put_in_production(empty_gitops, tmp_path, "other", "v1", V1)
    assert read_production(str(empty_gitops), MODEL) is None
    assert production_metrics(str(empty_gitops), MODEL) is None


def test_a_canary_in_flight_leaves_the_stable_version_in_production(empty_gitops, tmp_path):
    put_in_production(empty_gitops, tmp_path, MODEL, "v1", V1)
    put_in_production(empty_gitops, tmp_path, MODEL, "v2", {"map50": 0.95, "map": 0.7})
    state = yaml.safe_load(_main_file(empty_gitops, f"apps/{MODEL}/promotion.yaml"))
    assert (state["phase"], state["stable"], state["candidate"]) == ("waiting", "v1", "v2")

    found = read_production(str(empty_gitops), MODEL)
    assert (found.version, found.metrics) == ("v1", V1)


def test_the_annotation_serves_where_the_model_dir_is_not_reachable(empty_gitops, tmp_path):
    """In a cluster model-uri is not a local path: the metrics still come through."""
    put_in_production(empty_gitops, tmp_path, MODEL, "v1", V1, model_uri_prefix="pvc://models")
    assert production_metrics(str(empty_gitops), MODEL) == V1

    # The PR report of the next candidate compares with them too.
    v2 = fake_model_dir(tmp_path, MODEL, "v2", {"map50": 0.93, "map": 0.65})
    forge = LocalForge(empty_gitops)
    result = propose(v2, str(empty_gitops), forge, load_policy({}),
                     model_uri_prefix="pvc://models")
    body = forge.get_pr(result.pr_number).body
    assert "| mAP@0.5 | 0.9300 | 0.9000 | +0.0300 |" in body


def test_deployments_without_the_annotation_fall_back_to_model_yaml(empty_gitops, tmp_path):
    v1 = fake_model_dir(tmp_path, MODEL, "v1", V1)

    def older_proposal(root: pathlib.Path) -> None:  # as propose wrote them before the annotation
        layout.write_model(root, MODEL, [
            manifests.deployment(MODEL, "v1", image="i", model_uri=v1.resolve().as_uri(),
                                 weights_sha256=SHA),
            manifests.destination_rule(MODEL, "v1"),
        ])

    _commit(empty_gitops, older_proposal)
    found = read_production(str(empty_gitops), MODEL)
    assert (found.version, found.metrics) == ("v1", V1)
    assert found.source == str(v1.resolve() / "model.yaml")

    (v1 / "model.yaml").unlink()  # neither annotation nor reachable model.yaml
    found = read_production(str(empty_gitops), MODEL)
    assert (found.version, found.metrics, found.source) == ("v1", {}, "")
    assert production_metrics(str(empty_gitops), MODEL) is None


def test_the_destination_rule_names_the_stable_version_without_promotion_yaml():
    deployments = {
        v: manifests.deployment(MODEL, v, image="i", model_uri="pvc://m", weights_sha256=SHA,
                                metrics={"map50": m})
        for v, m in (("v1", 0.8), ("v2", 0.9))
    }
    current = layout.ModelState(model=MODEL, deployments=deployments,
                                destination_rule=manifests.destination_rule(MODEL, "v2", "v1"))
    assert production_of(current).metrics == {"map50": 0.9}
    # two Deployments and nothing saying which is stable: nothing to compare with
    assert production_of(layout.ModelState(model=MODEL, deployments=deployments)) is None


def test_a_hand_broken_annotation_is_an_error_naming_the_file(empty_gitops, tmp_path):
    put_in_production(empty_gitops, tmp_path, MODEL, "v1", V1)

    def break_it(root: pathlib.Path) -> None:
        path = root / "apps" / MODEL / "deployment-v1.yaml"
        doc = yaml.safe_load(path.read_text())
        doc["metadata"]["annotations"][manifests.ANNOTATION_METRICS] = "{map50: high"
        path.write_text(yaml.safe_dump(doc))

    _commit(empty_gitops, break_it)
    with pytest.raises(ProductionError, match=f"apps/{MODEL}/deployment-v1.yaml: .* not JSON"):
        read_production(str(empty_gitops), MODEL)


def test_an_unreadable_repo_or_branch_is_an_error_not_no_production(empty_gitops, tmp_path):
    with pytest.raises(ProductionError, match="branch 'release' not found") as info:
        read_production(str(empty_gitops), MODEL, branch="release")
    assert info.value.exit_code == 2
    with pytest.raises(ProductionError, match="cannot read the production model"):
        read_production(str(tmp_path / "nowhere.git"), MODEL)

