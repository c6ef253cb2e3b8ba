"""Several decisions, one push (`gitops.batch`, issue 31): one commit each, never forced.

Real parts: a guarded bare repo (no force, no deletes), the write-back's work
clone, a human's clone pushing by hand in the middle of a batch.
"""

from __future__ import annotations

import pathlib

from gitops.batch import BatchItem, commit_batch
from gitops.writeback import Backoff, Message, WriteBack
from tests.fixtures.gitops import Human, git, head

FAST = Backoff(tries=4, first=0.0, cap=0.0)


def _write(rel: str, text: str):
    def change(root: pathlib.Path) -> None:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return change


def _pushes(repo: pathlib.Path) -> int:
    return len(git(repo, "reflog", "show", "--format=%H", "refs/heads/main").split())


def test_each_item_is_its_own_commit_and_all_go_out_in_one_push(guarded_repo, tmp_path):
    git(guarded_repo, "config", "core.logAllRefUpdates", "always")
    writer = WriteBack(guarded_repo, workdir=tmp_path / "w", backoff=FAST)
    writer.commit("main", _write("README", "fleet\n"), Message("init"))
    before = _pushes(guarded_repo)
    results = commit_batch(writer, "main", [
        BatchItem(_write("apps/a/x", "1\n"), Message("canary(a): 10% -> 25%")),
        BatchItem(_write("README", "fleet\n"), Message("nothing to do")),
        BatchItem(_write("apps/b/x", "1\n"), Message("rollback(b): 10% -> 0%")),
    ])
    assert [r.status for r in results] == ["committed", "unchanged", "committed"]
    subjects = git(guarded_repo, "log", "--format=%s", "main").splitlines()[:3]
    assert subjects == ["rollback(b): 10% -> 0%", "canary(a): 10% -> 25%", "init"]
    assert results[2].commit == head(guarded_repo)
    assert results[0].commit == git(guarded_repo, "rev-parse", "main~1")
    assert _pushes(guarded_repo) == before + 1  # two commits, one ref update


def test_a_failing_change_drops_out_alone_and_leaves_no_trace(guarded_repo, tmp_path):
    writer = WriteBack(guarded_repo, workdir=tmp_path / "w", backoff=FAST)
    writer.commit("main", _write("README", "fleet\n"), Message("init"))

    def stale(root: pathlib.Path) -> None:
        (root / "apps/b/half-written").parent.mkdir(parents=True)
        (root / "apps/b/half-written").write_text("oops\n")
        raise RuntimeError("apps/b/promotion.yaml changed: decide again")

    results = commit_batch(writer, "main", [
        BatchItem(stale, Message("step(b)")),
        BatchItem(_write("apps/a/x", "1\n"), Message("step(a)")),
    ])
    assert results[0].status == "error" and "decide again" in str(results[0].error)
    assert results[1].status == "committed"
    files = git(guarded_repo, "ls-tree", "-r", "--name-only", "main").split()
    assert "apps/a/x" in files and not any(f.startswith("apps/b/") for f in files)


def test_a_moved_remote_runs_the_changes_again_on_its_tip(guarded_repo, tmp_path):
    """A human pushes while the batch is being written: the push is rejected, the
    changes run again on the human's commit (which stays), nothing is forced."""
    writer = WriteBack(guarded_repo, workdir=tmp_path / "w", backoff=FAST)
    writer.commit("main", _write("README", "fleet\n"), Message("init"))
    human = Human(guarded_repo, tmp_path / "ada")
    seen: list[bool] = []

    def racing(root: pathlib.Path) -> None:
        seen.append((root / "apps/b/by-hand").exists())
        if len(seen) == 1:  # the human's push lands between our commit and our push
            human.sync()
            human.write("apps/b/by-hand", "paused\n")
            human.commit_push("pause(b): by ada")
        (root / "apps/a").mkdir(parents=True, exist_ok=True)
        (root / "apps/a/x").write_text("25\n")

    results = commit_batch(writer, "main", [BatchItem(racing, Message("step(a)"))])
    assert results[0].status == "committed" and results[0].attempts == 2
    assert seen == [False, True]  # the second run saw the human's commit
    assert git(guarded_repo, "log", "--format=%s", "main").splitlines()[:3] == \
        ["step(a)", "pause(b): by ada", "init"]


def test_a_message_git_refuses_drops_out_alone(guarded_repo, tmp_path):
    """Issue 41, finding 9: a trailer with a control character (an ESC from a class
    name) made `format_message` raise outside the per-item `try`, and with
    `--workers > 1` every other model's decision of the pass was lost."""
    writer = WriteBack(guarded_repo, workdir=tmp_path / "w", backoff=FAST)
    writer.commit("main", _write("README", "fleet\n"), Message("init"))
    results = commit_batch(writer, "main", [
        BatchItem(_write("apps/a/x", "1\n"), Message("rollback(a): 10% -> 0%")),
        BatchItem(_write("apps/b/x", "1\n"),
                  Message("rollback(b): 10% -> 0%", trailers=[("Mlops-Reason", "cat\x1b[2J")])),
        BatchItem(_write("apps/c/x", "1\n"), Message("rollback(c): 10% -> 0%")),
    ])
    assert [r.status for r in results] == ["committed", "error", "committed"]
    assert "control character" in str(results[1].error)
    files = git(guarded_repo, "ls-tree", "-r", "--name-only", "main").split()
    assert {"apps/a/x", "apps/c/x"} <= set(files) and "apps/b/x" not in files
