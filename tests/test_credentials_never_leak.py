"""A GitOps URL with a token never lands in argv, a file or a message (issue 16, finding 9).

The review found `https://user:token@host/repo.git` unredacted in the sync's
`git ls-remote` argv (every 0.5 s), its errors, platform.json, status.json,
`mlops up/status` output, the hook's git config and run logs. Real git runs
against an unreachable loopback URL; real files are read back.
"""

from __future__ import annotations

import subprocess

import pytest

from local.argo.hooks import install_hook, run_queued
from local.platform.gitsource import GitSource, GitSourceError
from local.platform.workdir import Workdir, resolve_config
from workflows.errors import ConfigError

TOKEN = "s3cr3t-t0ken"
URL = f"https://bot:{TOKEN}@127.0.0.1:9/org/gitops.git"  # port 9: nothing listens


def test_the_sync_reads_with_the_token_in_its_env_not_in_argv(tmp_path):
    source = GitSource(URL, "main", tmp_path / "cache")
    argv = source._runner.argv("ls-remote", source.repo, "refs/heads/main")
    assert TOKEN not in " ".join(argv) and source.repo == "https://127.0.0.1:9/org/gitops.git"
    assert source._runner.env["MLOPS_GIT_TOKEN"] == TOKEN  # how git still gets it
    with pytest.raises(GitSourceError) as err:
        source.head()
    assert TOKEN not in str(err.value) and "127.0.0.1:9" in str(err.value)


def test_the_platform_config_keeps_the_url_without_its_token(tmp_path):
    wd = Workdir(tmp_path / "platform")
    config = resolve_config(wd, URL, None, None, running=False)
    assert config.gitops == "https://127.0.0.1:9/org/gitops.git"
    assert TOKEN not in repr(config)


def test_a_hook_refuses_to_store_a_url_with_credentials(tmp_path, capsys):
    bare = tmp_path / "models.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    with pytest.raises(ConfigError) as err:
        install_hook(bare, gitops=URL)
    assert TOKEN not in str(err.value)
    assert TOKEN not in (bare / "config").read_text()


def test_a_queued_run_prints_its_command_without_the_token(tmp_path, capsys):
    assert run_queued(tmp_path / "lock", ["true", "--gitops", URL]) == 0
    printed = capsys.readouterr().out
    assert "starting: true --gitops" in printed and TOKEN not in printed
