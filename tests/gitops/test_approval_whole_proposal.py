"""Approval merges exactly what propose wrote (issue 16, finding 6).

The review approved a PR whose branch pointed `model-uri` at other weights
(or changed `image:`) because only the digest annotation was compared; and
training-written text with `<!-- mlops:proposal {` in a hyperparameter made
the record unreadable, so approval merged "without a digest check". Real
bare repos, `mlops promote propose` and `mlops pr approve` through the CLI.
"""

from __future__ import annotations

import os
import pathlib
import subprocess

import yaml

from gitops.forges.local import LocalForge
from gitops.git import BOT_IDENTITY
from gitops.proposal import parse_record
from mlops.cli import main as cli
from promotion.reports.report import evaluation_report
from tests.fixtures.production import fake_model_dir

MODEL = "shapes"


def _propose(repo: pathlib.Path, tmp_path: pathlib.Path, version: str, **record) -> int:
    model_dir = fake_model_dir(tmp_path, MODEL, version, {"map50": 0.9, "map": 0.6})
    if record:
        path = model_dir / "model.yaml"
        path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **record}))
    assert cli(["promote", "propose", str(model_dir), "--gitops", str(repo)]) == 0
    return LocalForge(repo).find_pr(f"mlops/propose/{MODEL}/{version}").number


def _push_to_branch(repo, tmp_path, branch, change, *, as_bot=False) -> None:
    work = tmp_path / f"edit-{len(list(tmp_path.glob('edit-*')))}"
    subprocess.run(["git", "clone", "-q", "-b", branch, str(repo), str(work)], check=True)
    change(work)
    who = (BOT_IDENTITY.name, BOT_IDENTITY.email) if as_bot else ("Mallory", "m@example.com")
    env = {**os.environ, "GIT_AUTHOR_NAME": who[0], "GIT_AUTHOR_EMAIL": who[1],
           "GIT_COMMITTER_NAME": who[0], "GIT_COMMITTER_EMAIL": who[1]}
    subprocess.run(["git", "-C", str(work), "commit", "-qam", "tweak"], check=True, env=env)
    subprocess.run(["git", "-C", str(work), "push", "-q", "origin", branch], check=True)


def _edit_deployment(version: str, fn):
    def change(root: pathlib.Path) -> None:
        path = root / "apps" / MODEL / f"deployment-{version}.yaml"
        doc = yaml.safe_load(path.read_text())
        fn(doc)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return change


def _main(repo) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "main"], capture_output=True,
                          text=True, check=True).stdout


def _other_weights(doc):
    doc["metadata"]["annotations"]["mlops.paddle.org/model-uri"] = "file:///elsewhere/v9"


def _other_image(doc):
    doc["spec"]["template"]["spec"]["containers"][0]["image"] = "evil.example.com/x:1"


def test_an_edited_model_uri_is_refused_even_under_the_bots_name(empty_gitops, tmp_path,
                                                                 capsys):
    number = _propose(empty_gitops, tmp_path, "v1")
    before = _main(empty_gitops)
    # Anyone can write the bot's name into a commit: the content is what is checked.
    _push_to_branch(empty_gitops, tmp_path, f"mlops/propose/{MODEL}/v1",
                    _edit_deployment("v1", _other_weights), as_bot=True)
    assert cli(["pr", "approve", str(number), "--repo", str(empty_gitops)]) == 5
    err = capsys.readouterr().err
    assert "differs from what propose wrote in apps/shapes/deployment-v1.yaml" in err
    assert _main(empty_gitops) == before


def test_a_human_edited_branch_is_refused_with_who_edited_it(empty_gitops, tmp_path, capsys):
    number = _propose(empty_gitops, tmp_path, "v1")
    _push_to_branch(empty_gitops, tmp_path, f"mlops/propose/{MODEL}/v1",
                    _edit_deployment("v1", _other_image))
    assert cli(["pr", "approve", str(number), "--repo", str(empty_gitops)]) == 5
    err = capsys.readouterr().err
    assert "edited by hand" in err and "Mallory <m@example.com>" in err


def test_training_text_cannot_forge_or_hide_the_record(empty_gitops, tmp_path):
    forged = '<!-- mlops:proposal {"model": "shapes", "version": "v1", "weights_sha256": "x"'
    number = _propose(empty_gitops, tmp_path, "v1", hyperparameters={forged: "1"})
    body = LocalForge(empty_gitops).get_pr(number).body
    assert "<!-- mlops:proposal {\"model\": \"shapes\", \"version\": \"v1\", \"weights" \
        not in body.split("\n<!-- mlops:proposal")[0]  # escaped in the report
    record = parse_record(body)
    assert record is not None and record.weights_sha256 != "x" and record.files
    # and approval does check it
    assert cli(["pr", "approve", str(number), "--repo", str(empty_gitops)]) == 0


def test_a_pr_without_a_record_is_not_merged(empty_gitops, tmp_path, capsys):
    number = _propose(empty_gitops, tmp_path, "v1")
    forge = LocalForge(empty_gitops)
    forge.update_pr(number, body="LGTM, trust me")
    before = _main(empty_gitops)
    assert cli(["pr", "approve", str(number), "--repo", str(empty_gitops)]) == 5
    assert "carries no mlops:proposal record" in capsys.readouterr().err
    assert _main(empty_gitops) == before


def test_the_report_escapes_html_from_training():
    body = evaluation_report({"name": MODEL, "version": "v1", "weights_sha256": "a" * 64,
                              "metrics": {"map50": 0.9},
                              "hyperparameters": {"<!-- x": "<b>"}})
    assert "<!--" not in body and "&lt;!-- x" in body and "&lt;b>" in body
