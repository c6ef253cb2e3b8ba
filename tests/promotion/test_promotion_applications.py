"""The controller's Argo CD grant follows the GitOps repo's models (issue 31, item 3).

Real parts: a bare GitOps repo made by `init_repo`, models committed through
the write-back, the real `mlops controller manifests` command.
"""

from __future__ import annotations

import yaml

from gitops import layout
from gitops.repo import init_repo
from gitops.writeback import Message, WriteBack
from mlops.cli import main
from promotion.cluster.applications import application_names, applications_in
from serving import manifests


def _add_model(repo, model: str) -> None:
    WriteBack(repo).commit("main", lambda root: layout.write_model(
        root, model, [manifests.service(model)]), Message(f"add {model}"))


def test_names_are_the_valid_model_folders_sorted_once():
    assert application_names(["shapes", "faces", "Bad_Name", "faces", ".git"]) == \
        ["faces", "shapes"]


def test_manifests_grant_exactly_the_models_on_main_and_follow_a_new_one(tmp_path, capsys):
    repo = tmp_path / "gitops.git"
    init_repo(repo)
    _add_model(repo, "shapes")
    _add_model(repo, "faces")
    assert applications_in(str(repo)) == ["faces", "shapes"]

    def role_names() -> list[str]:
        code = main(["controller", "manifests", "--gitops", "https://git.example.com/g.git",
                     "--prometheus", "http://p:9090", "--application", "shapes",
                     "--applications-from", str(repo)])
        assert code == 0
        docs = list(yaml.safe_load_all(capsys.readouterr().out))
        role = next(d for d in docs if d["kind"] == "Role"
                    and d["metadata"]["namespace"] == "argocd")
        return role["rules"][0]["resourceNames"]

    assert role_names() == ["shapes", "faces"]  # given first, then the repo's, each once
    _add_model(repo, "cars")  # a model added to the fleet: the next render grants it too
    assert role_names() == ["shapes", "cars", "faces"]


def test_a_repo_without_main_is_a_clear_error(tmp_path, capsys):
    code = main(["controller", "manifests", "--gitops", "https://g/r.git", "--prometheus",
                 "http://p:9090", "--applications-from", str(tmp_path / "missing.git")])
    err = capsys.readouterr().err
    assert code != 0 and "missing.git" in err and "Traceback" not in err
