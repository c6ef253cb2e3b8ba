"""`git push` to a bare repo set up by mlops starts one local run per commit.

Real git, a real post-receive hook, a real background `mlops run`; the
model repo is the fast fake one (its gate fails on purpose so the run ends
at the gate whether or not `mlops promote` is installed). The real example
is pushed in `test_workflows_example.py` (slow).
"""

import json
import os
import pathlib
import signal
import time

import pytest

from mlops.cli import main as cli
from tests.fixtures.workflows import git, make_fake_model_repo
from workflows.errors import ConfigError
from workflows.hooks import decide, install_hook, post_receive

ZERO = "0" * 40
SHA = "a" * 40


def wait_for_run(home: pathlib.Path, timeout: float = 300.0) -> dict:
    """Wait until the background run wrote run.json; returns it."""
    deadline = time.monotonic() + timeout
    run_file = home / "out" / "run.json"
    while time.monotonic() < deadline:
        if run_file.is_file():
            pid = int((home / "pid").read_text())
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            return json.loads(run_file.read_text())
        time.sleep(0.2)
    log = (home / "run.log").read_text() if (home / "run.log").exists() else "(no log)"
    raise AssertionError(f"no run.json in {home} after {timeout}s; log:\n{log}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a finished child of ours that nobody reaped is a zombie, not alive
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return pathlib.Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return "Z"


@pytest.fixture
def runs_cleanup():
    """Stop any background run a test started, even when it fails."""
    homes: list[pathlib.Path] = []
    yield homes
    for runs in homes:
        for pid_file in runs.glob("*/pid"):
            pid = int(pid_file.read_text())
            if _alive(pid):
                os.killpg(pid, signal.SIGTERM)


def _push(repo, *args):
    return git(repo, "push", *args, "origin")


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

    proc_out = _push_capture(repo, "main")
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

    # A new commit runs; pushing the first sha back again starts nothing new.
    (repo / "README.md").write_text("second\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-qm", "second")
    sha_b = git(repo, "rev-parse", "HEAD")
    assert f"started a local run of {sha_b[:12]}" in _push_capture(repo, "main")
    wait_for_run(runs / sha_b)
    again = _push_capture(repo, "--force", f"{sha_a}:refs/heads/main")
    assert "already has a run" in again
    assert sorted(p.name for p in runs.iterdir() if p.is_dir()) == sorted([sha_a, sha_b])


def _push_capture(repo, *refspec):
    import subprocess

    from tests.fixtures.workflows import GIT_ENV

    proc = subprocess.run(
        ["git", "-C", str(repo), "push", "origin", *refspec],
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr  # git shows hook output as "remote: ..." on stderr


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
    assert "authored by the bot" in _push_capture(repo, "main")
    assert "not refs/heads/main" in _push_capture(repo, "main:refs/heads/feature")
    assert "deleted" in _push_capture(repo, ":refs/heads/feature")
    assert not (bare / "mlops-runs").exists()


def test_post_receive_twice_with_the_same_line(tmp_path, runs_cleanup):
    repo = make_fake_model_repo(tmp_path / "repo")
    bare = tmp_path / "model.git"
    assert cli(["hooks", "init-bare", str(bare), "--runs-dir", str(tmp_path / "runs")]) == 0
    runs_cleanup.append(tmp_path / "runs")
    git(repo, "push", "-q", str(bare), "main")  # first delivery (the hook starts the run)
    sha = git(repo, "rev-parse", "HEAD")
    wait_for_run(tmp_path / "runs" / sha)
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
