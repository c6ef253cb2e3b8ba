"""`git push` to a bare repo set up by mlops starts one local run per commit.

Real git, a real post-receive hook, a real background `mlops run`; the
model repo is the fast fake one (its gate fails on purpose so the run ends
at the gate whether or not `mlops promote` is installed). The real example
is pushed in `test_workflows_example.py` (slow).
"""

import json
import os
import subprocess

import pytest

from local.argo.hooks import decide, install_hook, post_receive
from mlops.cli import main as cli
from tests.fixtures.workflows import git, make_fake_model_repo, push_capture, wait_for_run
from workflows.errors import ConfigError

ZERO = "0" * 40
SHA = "a" * 40


def test_decide():
    author = ("Dev", "dev@example.com")
    assert (
        decide(SHA, ZERO, "refs/heads/main", branch="main", author=author, bot="mlops-bot").run
        is False
    )
    assert (
        decide(ZERO, SHA, "refs/heads/dev", branch="main", author=author, bot="mlops-bot").run
        is False
    )
    bot = decide(
        ZERO, SHA, "refs/heads/main", branch="main", author=("mlops-bot", "x@y"), bot="mlops-bot"
    )
    assert bot.run is False and "bot" in bot.reason
    bot_mail = decide(
        ZERO,
        SHA,
        "refs/heads/main",
        branch="main",
        author=("Bot", "mlops-bot@x.org"),
        bot="mlops-bot",
    )
    assert bot_mail.run is False
    assert (
        decide(ZERO, SHA, "refs/heads/main", branch="main", author=author, bot="mlops-bot").run
        is True
    )


def test_push_starts_one_local_run_per_commit(tmp_path, runs_cleanup, capsys):
    # Boxes off by 4px: mAP@0.5 is 1.0 but mAP@[.5:.95] < 0.99, so the gate fails.
    repo = make_fake_model_repo(tmp_path / "repo", box_shift=4, gate_min=0.99, metric="map")
    bare = tmp_path / "model.git"
    assert cli(["hooks", "init-bare", str(bare)]) == 0
    runs = bare / "mlops-runs"
    runs_cleanup.append(runs)
    git(repo, "remote", "add", "origin", str(bare))

    proc_out = push_capture(repo, "main")
    sha_a = git(repo, "rev-parse", "HEAD")
    assert f"started a local run of {sha_a[:12]}" in proc_out
    run = wait_for_run(runs / sha_a)
    phases = {t["name"]: t["phase"] for t in run["tasks"]}
    assert phases["gate"] == "Succeeded" and phases["propose"] == "Skipped"
    out = runs / sha_a / "out"
    assert json.loads((out / "full" / "gate.json").read_text())["passed"] is False
    assert "FAIL" in (out / "report.md").read_text()
    assert run["parameters"]["revision"] == sha_a
    assert (runs / sha_a / "repo" / "mlops.yaml").is_file()  # a checkout of the pushed sha

    # A new commit runs; forcing the first sha back onto main is refused (the repo
    # protects its history) and starts nothing (a repeated line: see the next tests).
    (repo / "README.md").write_text("second\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-qm", "second")
    sha_b = git(repo, "rev-parse", "HEAD")
    assert f"started a local run of {sha_b[:12]}" in push_capture(repo, "main")
    wait_for_run(runs / sha_b)
    again = subprocess.run(["git", "-C", str(repo), "push", "--force", "origin",
                            f"{sha_a}:refs/heads/main"], capture_output=True, text=True)
    assert again.returncode != 0 and "non-fast-forward update of main" in again.stderr
    assert git(bare, "rev-parse", "main") == sha_b
    assert sorted(p.name for p in runs.iterdir() if p.is_dir()) == sorted([sha_a, sha_b])


def test_bot_commits_other_branches_and_deletions_start_nothing(tmp_path, runs_cleanup):
    repo = make_fake_model_repo(tmp_path / "repo")
    bare = tmp_path / "model.git"
    assert cli(["hooks", "init-bare", str(bare), "--bot", "mlops-bot"]) == 0
    runs_cleanup.append(bare / "mlops-runs")
    git(repo, "remote", "add", "origin", str(bare))
    git(
        repo,
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "write-back",
        env={"GIT_AUTHOR_NAME": "mlops-bot", "GIT_AUTHOR_EMAIL": "mlops-bot@example.com"},
    )
    assert "authored by the bot" in push_capture(repo, "main")
    assert "not refs/heads/main" in push_capture(repo, "main:refs/heads/feature")
    assert "deleted" in push_capture(repo, ":refs/heads/feature")
    assert not (bare / "mlops-runs").exists()


def test_post_receive_twice_with_the_same_line(tmp_path, runs_cleanup, monkeypatch):
    # What the first delivery's run does is not this test's business (the test above
    # follows whole runs): its fake training fails at the smoke run, so the run ends
    # after one PaddleJob instead of two (each a process of the fake ./train.py).
    monkeypatch.setenv("FAKE_TRAIN_FAIL", "smoke")
    repo = make_fake_model_repo(tmp_path / "repo")
    bare = tmp_path / "model.git"
    assert cli(["hooks", "init-bare", str(bare), "--runs-dir", str(tmp_path / "runs")]) == 0
    runs_cleanup.append(tmp_path / "runs")
    git(repo, "push", "-q", str(bare), "main")  # first delivery (the hook starts the run)
    sha = git(repo, "rev-parse", "HEAD")
    assert wait_for_run(tmp_path / "runs" / sha)["status"] == "Failed"  # at smoke-train
    messages = post_receive(bare, [f"{ZERO} {sha} refs/heads/main\n"])  # a duplicate delivery
    assert messages == [
        f"mlops: {sha[:12]} already has a run ({tmp_path / 'runs' / sha}); not starting another"
    ]


def test_install_refuses_non_bare_and_foreign_hooks(tmp_path, fake_model_repo):
    with pytest.raises(ConfigError, match="not a bare git repository"):
        install_hook(fake_model_repo)
    bare = tmp_path / "b.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    (bare / "hooks" / "post-receive").write_text("#!/bin/sh\necho theirs\n")
    with pytest.raises(ConfigError, match="did not write"):
        install_hook(bare)
    (bare / "hooks" / "post-receive").unlink()
    hook = install_hook(bare, branch="trunk")
    assert os.access(hook, os.X_OK)
    assert git(bare, "config", "mlops.branch") == "trunk"
    assert cli(["hooks", "init-bare", str(bare)]) == 2  # exists and not empty


def test_init_bare_stores_a_relative_gitops_path_as_absolute(tmp_path, monkeypatch, capsys):
    # Runs start in <runs>/<sha>/, so a path relative to where the user typed
    # the command would point nowhere by the time `propose` reads it.
    (tmp_path / "gitops.git").mkdir()
    monkeypatch.chdir(tmp_path)
    assert cli(["hooks", "init-bare", "models.git", "--gitops", "gitops.git"]) == 0
    stored = git(tmp_path / "models.git", "config", "mlops.gitopsRepo")
    assert stored == str(tmp_path / "gitops.git")
    url = "https://git.example.com/org/gitops.git"
    assert cli(["hooks", "install", "models.git", "--gitops", url]) == 0
    assert git(tmp_path / "models.git", "config", "mlops.gitopsRepo") == url
    assert cli(["hooks", "init-bare", "other.git", "--gitops", "missing.git"]) == 2
    assert "missing.git: no such directory" in capsys.readouterr().err
    assert not (tmp_path / "other.git").exists()
