"""Repositories the project makes keep their history: no force push to main, no deletion.

Real git and real hooks: a human clones the repo `mlops gitops init` (or
`mlops hooks init-bare`) made and tries what would rewrite the audit trail.
"""

import os
import pathlib
import subprocess

import pytest

from gitops.protect import protect_branch
from mlops.cli import main as cli
from tests.fixtures.gitops import HUMAN_ENV, git

ZERO = "0" * 40


def _push(clone: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "push", *args], cwd=clone, capture_output=True, text=True,
                          env={**os.environ, **HUMAN_ENV})


def _clone(bare: pathlib.Path, where: pathlib.Path) -> pathlib.Path:
    git(where.parent, "clone", "-q", str(bare), str(where))
    return where


def _commit(clone: pathlib.Path, name: str) -> str:
    (clone / name).write_text(name + "\n")
    git(clone, "add", name)
    git(clone, "commit", "-qm", f"add {name}")
    return git(clone, "rev-parse", "HEAD")


def test_gitops_repo_refuses_force_push_and_deletion_of_main(tmp_path, capsys):
    bare = tmp_path / "gitops.git"
    assert cli(["gitops", "init", str(bare)]) == 0
    capsys.readouterr()
    clone = _clone(bare, tmp_path / "clone")
    tip = git(clone, "rev-parse", "HEAD")

    # A normal push (fast-forward) goes through.
    _commit(clone, "README-extra.md")
    assert _push(clone, "origin", "main").returncode == 0
    kept = git(clone, "rev-parse", "HEAD")

    # Rewriting it does not: reset to the older tip, commit something else, force.
    git(clone, "reset", "-q", "--hard", tip)
    _commit(clone, "rewrite.md")
    forced = _push(clone, "--force", "origin", "main")
    assert forced.returncode != 0
    assert "non-fast-forward update of main" in forced.stderr
    assert git(bare, "rev-parse", "main") == kept  # history as it was

    deleted = _push(clone, "origin", ":main")
    assert deleted.returncode != 0 and "deleting main is not allowed" in deleted.stderr
    assert git(bare, "rev-parse", "main") == kept

    # Other branches are people's and proposals' own: deleting one is fine.
    assert _push(clone, "origin", "HEAD:refs/heads/work").returncode == 0
    assert _push(clone, "origin", ":work").returncode == 0


def test_model_repo_made_by_init_bare_protects_main(tmp_path, capsys):
    """The model repo's hook would start a run on a push to main, so main is created
    here with `git update-ref` (no hooks run) and only refused pushes are tried."""
    bare = tmp_path / "models.git"
    assert cli(["hooks", "init-bare", str(bare), "--runs-dir", str(tmp_path / "runs")]) == 0
    capsys.readouterr()
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q")
    first = _commit(work, "a.txt")
    git(work, "push", "-q", str(bare), "HEAD:refs/heads/seed")
    git(bare, "update-ref", "refs/heads/main", first)
    git(work, "checkout", "-q", "--orphan", "other")
    _commit(work, "b.txt")
    forced = _push(work, "--force", str(bare), "HEAD:refs/heads/main")
    assert forced.returncode != 0 and "non-fast-forward update of main" in forced.stderr
    deleted = _push(work, str(bare), ":main")
    assert deleted.returncode != 0 and "deleting main is not allowed" in deleted.stderr
    assert git(bare, "rev-parse", "main") == first
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_foreign_pre_receive_hook_is_not_replaced(tmp_path):
    hook = tmp_path / "hooks" / "pre-receive"
    hook.parent.mkdir()
    hook.write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(FileExistsError, match="pre-receive hook that mlops did not write"):
        protect_branch(tmp_path)
    assert hook.read_text() == "#!/bin/sh\nexit 0\n"
