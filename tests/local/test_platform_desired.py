"""What the sync reads from ``apps/<model>/``: specs, and errors that name the file."""


import pytest

from gitops import layout
from local.platform.desired import (
    ModelProblem,
    ModelSpec,
    VersionSpec,
    merge_last_good,
    read_checkout,
    spec_from_state,
)
from serving import manifests

SHA = "ab" * 32


def docs(weights=(90, 10), uri="file:///models/v2", model="shapes"):
    return [
        manifests.service(model),
        manifests.destination_rule(model, "v1", "v2"),
        manifests.virtual_service(model, *weights),
        manifests.deployment(
            model, "v1", image="i", model_uri="file:///models/v1", weights_sha256=SHA
        ),
        manifests.deployment(model, "v2", image="i", model_uri=uri, weights_sha256=SHA),
    ]


@pytest.fixture
def tree(tmp_path):
    layout.init_tree(tmp_path, layout.RepoConfig(repo_url="file:///x"))
    layout.write_model(tmp_path, "shapes", docs())
    return tmp_path


def test_reads_versions_dirs_and_weights(tree):
    specs, errors = read_checkout(tree)
    assert errors == []
    spec = specs["shapes"]
    assert spec.weights == {"v1": 90, "v2": 10}
    assert spec.versions["v2"].model_dir == "/models/v2"
    assert spec.versions["v1"].weights_sha256 == SHA


def test_stable_only_virtual_service(tmp_path):
    layout.init_tree(tmp_path, layout.RepoConfig(repo_url="file:///x"))
    layout.write_model(tmp_path, "shapes", [
        manifests.destination_rule("shapes", "v1"),
        manifests.virtual_service("shapes", 100, 0, canary=False),
        manifests.deployment("shapes", "v1", image="i", model_uri="file:///m", weights_sha256=SHA),
    ])
    specs, errors = read_checkout(tmp_path)
    assert errors == [] and specs["shapes"].weights == {"v1": 100}


def test_broken_yaml_names_the_file_and_other_models_still_apply(tree):
    layout.write_model(tree, "other", docs(model="other"))
    (tree / "apps/shapes/virtualservice.yaml").write_text("spec: [unclosed\n")
    specs, errors = read_checkout(tree)
    assert list(specs) == ["other"]
    assert [e.file for e in errors] == ["apps/shapes/virtualservice.yaml"]
    assert "apps/shapes/virtualservice.yaml" in errors[0].message


def test_weights_not_summing_to_100_name_the_virtual_service(tree):
    path = tree / "apps/shapes/virtualservice.yaml"
    path.write_text(path.read_text().replace("weight: 10", "weight: 20"))
    _, errors = read_checkout(tree)
    assert errors[0].file == "apps/shapes/virtualservice.yaml"
    assert "sum to 110" in errors[0].message


def test_route_to_a_version_without_deployment_is_an_error(tree):
    (tree / "apps/shapes/deployment-v2.yaml").unlink()
    _, errors = read_checkout(tree)
    assert errors and "no deployment-v2.yaml" in errors[0].message


def test_non_file_model_uri_is_refused(tmp_path):
    layout.init_tree(tmp_path, layout.RepoConfig(repo_url="file:///x"))
    layout.write_model(tmp_path, "shapes", docs(uri="s3://bucket/v2"))
    _, errors = read_checkout(tmp_path)
    assert errors[0].file == "apps/shapes/deployment-v2.yaml"
    assert "file://" in errors[0].message


def test_last_good_spec_is_kept_for_a_broken_model():
    good = ModelSpec(versions={"v1": VersionSpec("/m")}, weights={"v1": 100})
    error = ModelProblem("shapes", "apps/shapes/x.yaml", "broken")
    assert merge_last_good({"shapes": good}, {}, [error]) == {"shapes": good}
    # A model that disappeared cleanly is dropped.
    assert merge_last_good({"shapes": good}, {}, []) == {}


def test_spec_from_state_single_version_without_virtual_service():
    state = layout.ModelState(
        model="shapes",
        deployments={
            "v1": manifests.deployment(
                "shapes", "v1", image="i", model_uri="file:///m", weights_sha256=SHA
            )
        },
    )
    assert spec_from_state(state).weights == {"v1": 100}
