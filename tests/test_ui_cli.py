"""`mlops ui` and `mlops ui manifests` as a person runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

from mlops.cli import main
from tests.fixtures.common import free_port
from tests.manifest_validation import validate_all

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _manifests(capsys, *args: str) -> list[dict]:
    assert main(["ui", "manifests", "--gitops", "https://git.example.com/gitops.git",
                 "--prometheus", "http://prometheus.monitoring:9090", *args]) == 0
    return list(yaml.safe_load_all(capsys.readouterr().out))


def test_manifests_validate_and_are_read_only_by_default(capsys):
    docs = _manifests(capsys)
    assert validate_all(docs) == 2
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    container = docs[0]["spec"]["template"]["spec"]["containers"][0]
    assert "--read-only" in container["args"] and "MLOPS_GIT_TOKEN" not in str(container)
    docs = _manifests(capsys, "--enable-actions", "--proxy-user")
    assert validate_all(docs) == 2
    args = docs[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--proxy-user" in args and "--read-only" not in args


def test_manifests_refuse_actions_without_a_guard(capsys):
    assert main(["ui", "manifests", "--gitops", "https://g/r.git", "--enable-actions"]) == 2
    assert "need --token-secret or --proxy-user" in capsys.readouterr().err


def test_ui_refuses_actions_beyond_loopback_without_a_token(tmp_path, capsys):
    assert main(["ui", "--gitops", str(tmp_path), "--workdir", str(tmp_path),
                 "--host", "0.0.0.0"]) == 2
    assert "exposes the actions" in capsys.readouterr().err


def test_ui_serves_on_loopback_and_prints_its_address(ui_repo, tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": ROOT, "MLOPS_WORKDIR": str(tmp_path / "none")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlops", "ui", "--gitops", str(ui_repo.gitops),
         "--port", str(port), "--by", "ada"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith(f"mlops ui: http://127.0.0.1:{port}/"), first
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/models") as res:
                    body = res.read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline, "mlops ui did not answer"
                time.sleep(0.2)
        assert '"name":"det"' in body
        rebound = urllib.request.Request(f"http://127.0.0.1:{port}/api/models",
                                         headers={"Host": f"evil.example:{port}"})
        try:
            urllib.request.urlopen(rebound)
            raise AssertionError("a foreign Host header was answered")
        except urllib.error.HTTPError as exc:
            assert exc.code == 400
    finally:
        proc.terminate()
        proc.wait(10)


def test_manifests_name_the_forge_and_argo_with_their_secrets(capsys):
    docs = _manifests(capsys, "--forge", "github", "--argo-server", "https://argo:2746",
                      "--argo-secret", "argo-token")
    assert validate_all(docs) == 2
    container = docs[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][container["args"].index("--forge") + 1] == "github"
    assert "--argo-server" in container["args"]
    assert {e["name"] for e in container["env"]} >= {"GITHUB_TOKEN", "ARGO_TOKEN"}


def test_ui_reads_prs_from_the_forge_mlops_pr_uses(ui_repo, tmp_path):
    import argparse

    from mlops.commands.ui import register, ui_config

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["ui", "--gitops", str(ui_repo.gitops),
                              "--workdir", str(tmp_path / "none")])
    forge = ui_config(args).forge()
    assert [pr.number for pr in forge.list_prs("open")] == [ui_repo.pr]
