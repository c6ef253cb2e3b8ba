"""GitOps repo layout: init, model folders, kustomize build, schemas, golden files.

Real git (bare repos in tmp dirs) and the real `kubectl kustomize`.
"""

import pathlib
import subprocess

import pytest
import yaml

from contracts.traffic import weights_by_version
from gitops import layout, proposal, yamlio
from gitops.errors import BrokenManifestError, GitOpsError
from gitops.repo import Mirror, init_repo
from gitops.writeback import Message, WriteBack
from mlops.cli import main as cli
from serving import manifests
from tests.fixtures.gitops import FAST, git, head
from tests.manifest_validation import assert_golden, validate_all, validate_manifest

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden" / "gitops"
SHA1, SHA2 = "11" * 32, "22" * 32


def canary_docs():
    return [
        manifests.service("shapes-detector"),
        manifests.destination_rule("shapes-detector", "v1", "v2"),
        manifests.virtual_service("shapes-detector", 90, 10),
        manifests.deployment(
            "shapes-detector",
            "v1",
            image="registry.local/shapes:v1",
            model_uri="file:///var/lib/mlops/models/shapes-detector/v1",
            weights_sha256=SHA1,
            replicas=2,
        ),
        manifests.deployment(
            "shapes-detector",
            "v2",
            image="registry.local/shapes:v2",
            model_uri="file:///var/lib/mlops/models/shapes-detector/v2",
            weights_sha256=SHA2,
        ),
    ]


PROMOTION = "phase: canary\ncandidate: v2\nweight: 10\n"


@pytest.fixture
def tree(tmp_path):
    """A checkout-like directory with the layout and one model in canary."""
    root = tmp_path / "tree"
    root.mkdir()
    layout.init_tree(root, layout.RepoConfig(repo_url="https://git.example.com/ml/gitops.git"))
    layout.write_model(root, "shapes-detector", canary_docs(), extra={"promotion.yaml": PROMOTION})
    return root


def test_init_creates_bare_repo_with_layout_and_is_idempotent(tmp_path, capsys):
    target = tmp_path / "gitops.git"
    assert cli(["gitops", "init", str(target)]) == 0
    assert "initialised" in capsys.readouterr().out
    assert git(target, "rev-parse", "--is-bare-repository") == "true"
    files = git(target, "ls-tree", "-r", "--name-only", "main").split()
    assert files == ["README.md", "apps/.gitkeep", "argocd/.gitkeep", "mlops-gitops.yaml"]
    first = head(target)
    assert cli(["gitops", "init", str(target)]) == 0
    assert "already initialised" in capsys.readouterr().out
    assert head(target) == first
    config = yaml.safe_load(git(target, "show", "main:mlops-gitops.yaml"))
    assert config["repoURL"] == str(target) and config["targetRevision"] == "main"


def test_init_pushes_to_an_existing_empty_remote_by_url(tmp_path):
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    result = init_repo(f"file://{remote}", repo_url="https://git.example.com/ml/gitops.git")
    assert result.status == "committed"
    assert "README.md" in git(remote, "ls-tree", "--name-only", "main")


def test_init_refuses_a_non_bare_directory(tmp_path, capsys):
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q")
    (work / "x").write_text("x")
    assert cli(["gitops", "init", str(work)]) == 2
    assert "is not a bare git repository" in capsys.readouterr().err


def test_readme_tells_humans_what_they_may_edit(tree):
    text = (tree / "README.md").read_text()
    for words in (
        "you may edit `replicas` and `resources`",
        "virtualservice.yaml",
        "promotion.yaml",
        "Never** force-push",
        "mlops pr approve",
    ):
        assert words in text


def test_layout_files_match_golden(tree):
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        rel = path.relative_to(tree)
        assert_golden(GOLDEN / rel, path.read_text())


def test_every_document_validates(tree):
    state = layout.read_model(tree, "shapes-detector")
    assert validate_all(state.documents()) == 5
    validate_manifest(yaml.safe_load((tree / "argocd/shapes-detector.yaml").read_text()))


def test_argocd_application_syncs_automatically_with_prune_and_self_heal(tree):
    app = yaml.safe_load((tree / "argocd/shapes-detector.yaml").read_text())
    assert app["spec"]["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}
    assert app["spec"]["source"] == {
        "repoURL": "https://git.example.com/ml/gitops.git",
        "targetRevision": "main",
        "path": "apps/shapes-detector",
    }


def test_kubectl_kustomize_builds_and_output_validates(tree):
    proc = subprocess.run(
        ["kubectl", "kustomize", str(tree / "apps/shapes-detector")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    docs = list(yaml.safe_load_all(proc.stdout))
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == [
        ("Deployment", "shapes-detector-v1"),
        ("Deployment", "shapes-detector-v2"),
        ("DestinationRule", "shapes-detector"),
        ("Service", "shapes-detector"),
        ("VirtualService", "shapes-detector"),
    ]
    validate_all(docs)


def test_read_back_weights_and_extras(tree):
    state = layout.read_model(tree, "shapes-detector")
    assert sorted(state.deployments) == ["v1", "v2"]
    assert state.weights() == {"v1": 90, "v2": 10}
    assert state.extra["promotion.yaml"] == {"phase": "canary", "candidate": "v2", "weight": 10}
    assert layout.list_models(tree) == ["shapes-detector"]
    assert set(layout.read_repo(tree)) == {"shapes-detector"}


def test_stable_only_weights(tmp_path):
    dr = manifests.destination_rule("m", "v1")
    vs = manifests.virtual_service("m", 100, 0, canary=False)
    assert weights_by_version(dr, vs) == {"v1": 100}


def test_removing_a_version_and_keeping_human_resources(tree):
    kfile = tree / "apps/shapes-detector/kustomization.yaml"
    k = yaml.safe_load(kfile.read_text())
    k["resources"].append("hpa.yaml")
    kfile.write_text(yamlio.dump(k))
    (tree / "apps/shapes-detector/hpa.yaml").write_text(
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\n"
    )
    layout.write_model(
        tree,
        "shapes-detector",
        [
            manifests.destination_rule("shapes-detector", "v2"),
            manifests.virtual_service("shapes-detector", 100, 0, canary=False),
        ],
        remove_versions=["v1"],
    )
    state = layout.read_model(tree, "shapes-detector")
    assert sorted(state.deployments) == ["v2"]
    assert state.weights() == {"v2": 100}
    assert state.kustomization["resources"] == [
        "service.yaml",
        "destinationrule.yaml",
        "virtualservice.yaml",
        "deployment-v2.yaml",
        "hpa.yaml",
    ]
    assert state.extra["promotion.yaml"]["candidate"] == "v2"  # untouched extra kept


@pytest.mark.parametrize(
    "file, text, words",
    [
        (
            "virtualservice.yaml",
            "spec:\n  http: [\n",
            "apps/shapes-detector/virtualservice.yaml: not valid YAML (line",
        ),
        (
            "service.yaml",
            "kind: Deployment\n",
            "apps/shapes-detector/service.yaml: expected a Service",
        ),
        (
            "deployment-v2.yaml",
            yamlio.dump(
                manifests.deployment(
                    "shapes-detector", "v3", image="i", model_uri="u", weights_sha256=SHA2
                )
            ),
            "deployment-v2.yaml: label version='v3' does not match",
        ),
        ("promotion.yaml", "a: 1\n---\nb: 2\n", "promotion.yaml: holds 2 YAML documents"),
        (
            "promotion.yaml",
            "phase: [canary\n",
            "apps/shapes-detector/promotion.yaml: not valid YAML",
        ),
    ],
)
def test_hand_broken_files_are_named(tree, file, text, words):
    (tree / "apps/shapes-detector" / file).write_text(text)
    with pytest.raises(BrokenManifestError) as info:
        layout.read_model(tree, "shapes-detector")
    assert words in str(info.value)
    before = {p: p.read_text() for p in tree.rglob("*.yaml")}
    with pytest.raises(BrokenManifestError):
        layout.write_model(
            tree, "shapes-detector", [manifests.virtual_service("shapes-detector", 75, 25)]
        )
    assert {p: p.read_text() for p in tree.rglob("*.yaml")} == before  # nothing written


def test_bad_writes_are_refused(tree):
    with pytest.raises(GitOpsError, match="does not belong to model"):
        layout.write_model(tree, "shapes-detector", [manifests.service("other")])
    with pytest.raises(GitOpsError, match="kind 'ConfigMap' has no place"):
        layout.write_model(tree, "shapes-detector", [{"kind": "ConfigMap", "metadata": {}}])
    with pytest.raises(GitOpsError, match="reserved"):
        layout.write_model(tree, "shapes-detector", extra={"kustomization.yaml": "x"})
    with pytest.raises(GitOpsError, match="inside the repository"):
        layout.write_files(tree, {"../evil.yaml": "x"})
    with pytest.raises(GitOpsError, match="belongs in"):
        layout.write_files(
            tree,
            {
                "apps/shapes-detector/service.yaml": manifests.virtual_service(
                    "shapes-detector", 100, 0
                )
            },
        )
    with pytest.raises(GitOpsError, match="is not valid"):
        layout.read_model(tree, "Bad_Name")


def test_uninitialised_repo_is_named(tmp_path):
    with pytest.raises(GitOpsError, match="mlops-gitops.yaml is missing"):
        layout.write_model(tmp_path, "m", [manifests.service("m")])


def test_cli_show_prints_versions_weights_digests(tmp_path, capsys):
    repo = tmp_path / "gitops.git"
    init_repo(repo)
    WriteBack(repo, backoff=FAST).commit(
        "main",
        lambda root: layout.write_model(root, "shapes-detector", canary_docs()),
        Message("canary(shapes-detector): 0% -> 10%"),
    )
    assert cli(["gitops", "show", "--repo", str(repo)]) == 0
    out = capsys.readouterr().out
    assert "v1                   weight  90%  replicas 2  sha256 111111111111" in out
    assert "v2                   weight  10%  replicas 1  sha256 222222222222" in out
    assert cli(["gitops", "show", "nope", "--repo", str(repo)]) == 2
    assert "model 'nope' is not in" in capsys.readouterr().err


def test_mirror_export_roundtrip(tmp_path):
    repo = tmp_path / "gitops.git"
    init_repo(repo)
    with Mirror(repo) as mirror:
        sha = mirror.export("main", tmp_path / "out")
    assert sha == head(repo)
    assert (tmp_path / "out/mlops-gitops.yaml").exists()


def test_annotation_constant_matches_serving():
    assert proposal.ANNOTATION_WEIGHTS_SHA256 == manifests.ANNOTATION_WEIGHTS_SHA256


def _v3():
    return manifests.deployment("shapes-detector", "v3", image="i", model_uri="u",
                                weights_sha256=SHA2)


@pytest.mark.parametrize("docs, remove", [
    ([], ["v1"]),
    ([_v3()], []),
    ([_v3()], ["v1", "v2"]),
    ([_v3()], ["v3"]),  # removed, then written again: it stays
])
def test_write_model_lists_what_refresh_model_finds(tree, docs, remove):
    """write_model parses the folder once and works out the kustomization from the plan;
    re-deriving it from the files on disk (refresh_model) must give the same text."""
    kfile = tree / "apps/shapes-detector/kustomization.yaml"
    k = yaml.safe_load(kfile.read_text())
    kfile.write_text(yamlio.dump({**k, "resources": [*k["resources"], "hpa.yaml"]}))
    layout.write_model(tree, "shapes-detector", docs, remove_versions=iter(remove))
    written = kfile.read_text()
    layout.refresh_model(tree, "shapes-detector")
    assert kfile.read_text() == written
    assert yaml.safe_load(written)["resources"][-1] == "hpa.yaml"


def test_a_broken_yaml_extra_is_refused_before_anything_is_written(tree):
    before = {p: p.read_text() for p in tree.rglob("*.yaml")}
    with pytest.raises(BrokenManifestError, match="apps/shapes-detector/promotion.yaml: holds 2"):
        layout.write_model(tree, "shapes-detector",
                           [manifests.virtual_service("shapes-detector", 75, 25)],
                           extra={"promotion.yaml": "a: 1\n---\nb: 2\n"})
    assert {p: p.read_text() for p in tree.rglob("*.yaml")} == before
