"""`mlops gitops lint`: the official schemas per file, then the rules between files.

A repository written by `mlops promote propose` (a stable version and a
canary in flight) passes; each broken rule, written by hand as a person
might, fails with a message naming the file and what to change. Real bare
git repos; the schemas are the upstream ones in workflows/schemas/.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

from contracts.names import MAX_MODEL_NAME, MAX_WORKERS, derived_names, model_name_problem
from gitops import layout
from gitops.errors import GitOpsError
from gitops.repo import init_repo
from mlops import cli
from promotion.decision.policy import load_policy
from promotion.gitrepo.lint import lint_tree, policy_problems
from serving import manifests
from tests.fixtures.production import put_in_production
from workflows.config import load_config
from workflows.errors import ConfigError
from workflows.resources import ResourceTemplate

MODEL = "shapes"


def _git(repo: pathlib.Path, *args: str, **kw) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True, **kw).stdout


@pytest.fixture(scope="module")
def proposed_template(tmp_path_factory):
    """v1 stable, v2 merged as a canary (waiting at 0 %), as propose writes them.

    Proposed once per module (two proposals: clones, commits and pushes, seconds on
    a busy machine); each test gets a copy of the bare repo (`proposed`)."""
    root = tmp_path_factory.mktemp("proposed")
    gitops = root / "gitops.git"
    init_repo(gitops)
    put_in_production(gitops, root, MODEL, "v1", {"map50": 0.9, "map": 0.6})
    put_in_production(gitops, root, MODEL, "v2", {"map50": 0.92, "map": 0.61})
    return gitops


@pytest.fixture
def proposed(proposed_template, tmp_path):
    """A test's own copy of the proposed repo (a bare repo is plain files: a copy is a clone)."""
    return pathlib.Path(shutil.copytree(proposed_template, tmp_path / "gitops.git",
                                        symlinks=True))


def _edit(repo: pathlib.Path, tmp_path: pathlib.Path, change) -> None:
    """Commit a hand edit to main, as a person with push rights would."""
    work = tmp_path / "edit"
    subprocess.run(["git", "clone", "-q", str(repo), str(work)], check=True)
    change(work)
    env = {"GIT_AUTHOR_NAME": "Human", "GIT_AUTHOR_EMAIL": "human@example.com",
           "GIT_COMMITTER_NAME": "Human", "GIT_COMMITTER_EMAIL": "human@example.com"}
    subprocess.run(["git", "-C", str(work), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(work), "commit", "-qm", "hand edit"], check=True,
                   env={**os.environ, **env})
    subprocess.run(["git", "-C", str(work), "push", "-q", "origin", "main"], check=True)


def _lint(repo, capsys, *extra) -> tuple[int, str]:
    code = cli.main(["gitops", "lint", "--repo", str(repo), "--scrape-interval", "1s", *extra])
    return code, capsys.readouterr().out


def test_a_proposed_repo_is_valid(proposed, capsys):
    code, out = _lint(proposed, capsys)
    assert code == 0, out
    # Deployments x2, Service, DestinationRule, VirtualService, Application: all schema-checked.
    assert "6 document(s)" in out and "valid" in out


def _yaml_edit(path: pathlib.Path, fn) -> None:
    doc = yaml.safe_load(path.read_text())
    fn(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


BROKEN = {
    "weights": (lambda root: _yaml_edit(
        root / f"apps/{MODEL}/virtualservice.yaml",
        lambda d: d["spec"]["http"][0]["route"][0].update(weight=50)),
        "weights sum to 50, not 100"),
    "subset without deployment": (lambda root: (root / f"apps/{MODEL}/deployment-v2.yaml")
                                  .unlink(),
                                  "selects version 'v2', which has no Deployment"),
    "state vs route": (lambda root: _yaml_edit(
        root / f"apps/{MODEL}/promotion.yaml", lambda d: d.update(phase="progressing", weight=25)),
        "promotion.yaml: weight 25 but virtualservice.yaml gives v2 0%"),
    "namespace": (lambda root: _yaml_edit(
        root / f"apps/{MODEL}/canary-policy.yaml",
        lambda d: d.setdefault("metrics", {}).update(namespace="default")),
        "metrics.namespace 'default' is not the namespace the models are deployed to"),
    "interval": (lambda root: _yaml_edit(
        root / f"apps/{MODEL}/canary-policy.yaml", lambda d: d.update(interval="1s")),
        "interval 1s is shorter than two Prometheus scrape intervals"),
    "kustomization": (lambda root: (root / f"apps/{MODEL}/hpa.yaml").write_text(
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: x}\n"
        "spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: x}, "
        "maxReplicas: 2}\n"),
        "hpa.yaml: not listed in kustomization.yaml"),
    "application": (lambda root: _yaml_edit(
        root / f"argocd/{MODEL}.yaml",
        lambda d: d["spec"]["destination"].update(namespace="prod")),
        "spec.destination.namespace is 'prod'; mlops-gitops.yaml says 'models'"),
    # issue 42, B3: a Gateway listed without `mesh` takes the split away from the mesh
    # (istio pilot/pkg/model/push_context.go getGatewayNames)
    "gateway without mesh": (lambda root: _yaml_edit(
        root / f"apps/{MODEL}/virtualservice.yaml",
        lambda d: d["spec"].update(gateways=["istio-system/public"])),
        "gateways ['istio-system/public'] leave out 'mesh'"),
    "schema": (lambda root: _yaml_edit(
        root / f"apps/{MODEL}/destinationrule.yaml",
        lambda d: d["spec"].update(trafficPolicy={"loadBalancer": {"simple": "FASTEST"}})),
        "DestinationRule shapes: spec.trafficPolicy.loadBalancer"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_broken_rule_fails_with_a_clear_message(case, proposed, tmp_path, capsys):
    change, words = BROKEN[case]
    _edit(proposed, tmp_path, change)
    code, out = _lint(proposed, capsys)
    assert code == 1, out
    assert words in out, out


def test_the_interval_rule_uses_the_scrape_interval_given(proposed, capsys):
    # The repo's policy is the default (60s): fine for a 30s Prometheus, not for a 1m one.
    assert _lint(proposed, capsys, "--scrape-interval", "30s")[0] == 0
    code, out = _lint(proposed, capsys, "--scrape-interval", "1m")
    assert code == 1 and "interval 60s is shorter than two Prometheus scrape intervals" in out


def test_policy_problems_is_pure_and_names_the_file():
    policy = load_policy({"interval": "20s", "metrics": {"preset": "istio",
                                                         "namespace": "models"}})
    assert policy_problems(policy, "f.yaml", namespace="models", scrape_interval=10) == []
    found = policy_problems(policy, "f.yaml", namespace="prod", scrape_interval=15)
    assert len(found) == 2 and all(p.startswith("f.yaml: ") for p in found)


def test_an_uninitialised_tree_says_so(tmp_path):
    assert lint_tree(tmp_path) == [
        "mlops-gitops.yaml is missing: not a GitOps repo (run `mlops gitops init`)"]


# -- one model-name rule ------------------------------------------------------------------

DNS_1035 = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


def test_every_name_derived_from_the_longest_model_name_is_a_dns_label():
    model = "m" * MAX_MODEL_NAME
    names = derived_names(model, "f" * 40, MAX_WORKERS)
    assert f"{model}-ffffffffffff-full-worker-{MAX_WORKERS - 1}" in names
    assert all(len(n) <= 63 and re.match(DNS_1035, n) for n in names), \
        [n for n in names if len(n) > 63]
    assert any(len(n) == 63 for n in names)  # the limit is tight, not generous


@pytest.mark.parametrize("name", ["m" * (MAX_MODEL_NAME + 1), "9lives", "Shapes", "a-"])
def test_one_rule_refuses_the_same_names_in_every_room(name, tmp_path):
    problem = model_name_problem(name)
    assert problem is not None
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "mlops.yaml").write_text(
        (pathlib.Path(__file__).resolve().parents[2] / "examples/shapes-detector/mlops.yaml")
        .read_text().replace("model: shapes-detector", f"model: '{name}'"))
    with pytest.raises(ConfigError, match="model name"):
        load_config(repo)
    with pytest.raises(manifests.ManifestError) as raised:
        manifests.service(name)
    assert str(raised.value) == problem
    with pytest.raises(GitOpsError) as raised:
        layout.application(name, layout.RepoConfig(repo_url="x"))
    assert str(raised.value) == problem


def test_more_workers_than_the_names_allow_are_refused():
    with pytest.raises(ValueError):
        ResourceTemplate(name="t", workers=MAX_WORKERS + 1, gpus=0, cpu="1", memory="1Gi",
                         image="i")

