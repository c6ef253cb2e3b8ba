"""`mlops ui` and `mlops ui manifests` as a person runs them."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

from mlops.cli import main
from mlops.commands.ui import register, ui_config
from promotion.cluster.deploy import controller_manifests
from tests.fixtures.common import free_port
from tests.manifest_validation import validate_all

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _manifests(capsys, *args: str) -> list[dict]:
    assert main(["ui", "manifests", "--gitops", "https://git.example.com/gitops.git",
                 "--prometheus", "http://prometheus.monitoring:9090", *args]) == 0
    return list(yaml.safe_load_all(capsys.readouterr().out))


def _pod(docs: list[dict]) -> dict:
    return next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]


def test_manifests_validate_and_are_read_only_by_default(capsys):
    docs = _manifests(capsys)
    assert validate_all(docs) == 2
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    container = docs[0]["spec"]["template"]["spec"]["containers"][0]
    assert "--read-only" in container["args"]


def test_a_read_only_ui_gets_the_git_token_the_way_the_controller_does(capsys):
    """Issue 25, defect 4: the read-only UI reads the (private) GitOps repo too, so it
    gets the controller's own `MLOPS_GIT_TOKEN` entry, from the same Secret."""

    controller = _pod(controller_manifests(gitops_url="https://g/r.git",
                                           prometheus_url="http://p:9090"))["containers"][0]
    expected = next(e for e in controller["env"] if e["name"] == "MLOPS_GIT_TOKEN")
    for flags in ((), ("--enable-actions", "--token-secret", "ui-token")):
        env = _pod(_manifests(capsys, *flags))["containers"][0]["env"]
        assert [e for e in env if e["name"] == "MLOPS_GIT_TOKEN"] == [expected]
    env = _pod(_manifests(capsys, "--git-secret", "gitops-read-only"))["containers"][0]["env"]
    token = next(e for e in env if e["name"] == "MLOPS_GIT_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": "gitops-read-only", "key": "token"}


def test_manifests_reach_argo_in_the_pipelines_namespace_with_a_token_and_a_ca(
        capsys, tmp_path):
    """Issue 25, defect 3: the Workflows' namespace is the settings' (the guide's
    `namespace: mlops`), argo-server's `client` auth gets a ServiceAccount token that may
    only read Workflows and their logs there, and its certificate is checked against a
    CA from a ConfigMap (or, by name, not at all)."""
    settings = tmp_path / "settings.yaml"
    settings.write_text("namespace: vision-ml\nimage_pull_secrets: [pull]\n")
    docs = _manifests(capsys, "--argo-server", "https://argo-server.argo:2746",
                      "--settings", str(settings), "--argo-ca-configmap", "argo-server-ca")
    assert validate_all(docs) == 6
    kinds = {(d["kind"], d["metadata"]["namespace"]) for d in docs}
    assert kinds == {("ServiceAccount", "mlops"), ("Secret", "mlops"), ("Role", "vision-ml"),
                     ("RoleBinding", "vision-ml"), ("Deployment", "mlops"), ("Service", "mlops")}
    secret = next(d for d in docs if d["kind"] == "Secret")
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"] == {
        "kubernetes.io/service-account.name": "mlops-ui-argo"}
    role = next(d for d in docs if d["kind"] == "Role")
    assert {v for rule in role["rules"] for v in rule["verbs"]} <= {"get", "list", "watch"}
    pod = _pod(docs)
    ui = pod["containers"][0]
    args = ui["args"]
    assert args[args.index("--argo-namespace") + 1] == "vision-ml"
    assert {"name": "ARGO_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": secret["metadata"]["name"], "key": "token"}}} in ui["env"]
    ca = args[args.index("--argo-ca") + 1]
    mount = next(m for m in ui["volumeMounts"] if ca.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == "argo-server-ca"
    assert volume["configMap"]["items"] == [{"key": "ca.crt", "path": ca.rsplit("/", 1)[1]}]
    assert pod["automountServiceAccountToken"] is False  # the token goes to argo-server only
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    insecure = _manifests(capsys, "--argo-server", "https://a:2746", "--argo-insecure",
                          "--argo-secret", "mine")
    assert [d["kind"] for d in insecure] == ["Deployment", "Service"]  # their own token
    args = _pod(insecure)["containers"][0]["args"]
    assert "--argo-insecure" in args and args[args.index("--argo-namespace") + 1] == "mlops"


def test_a_read_only_ui_has_no_api_token_and_one_with_actions_reads_only_deployments(
        capsys):
    """The rollback button is make-before-break in a cluster too: with actions the UI's
    own ServiceAccount may `get` Deployments in the models' namespace (what
    `KubernetesReadiness.check` reads), nothing else; read-only, the pod has no token."""
    read_only = _manifests(capsys)
    assert _pod(read_only)["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in _pod(read_only)
    assert [d["kind"] for d in read_only] == ["Deployment", "Service"]
    docs = _manifests(capsys, "--enable-actions", "--token-secret", "t",
                      "--models-namespace", "vision")
    assert validate_all(docs) == 5
    account, role, binding = docs[:3]
    pod = _pod(docs)
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "vision"
    assert role["rules"] == [{"apiGroups": ["apps"], "resources": ["deployments"],
                              "verbs": ["get"]},
                             {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "mlops-ui",
                                    "namespace": "mlops"}]


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
    container = _pod(docs)["containers"][0]
    assert container["args"][container["args"].index("--forge") + 1] == "github"
    assert "--argo-server" in container["args"]
    assert {e["name"] for e in container["env"]} >= {"GITHUB_TOKEN", "ARGO_TOKEN"}


def test_ui_reads_prs_from_the_forge_mlops_pr_uses(ui_repo, tmp_path):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["ui", "--gitops", str(ui_repo.gitops),
                              "--workdir", str(tmp_path / "none")])
    forge = ui_config(args).forge()
    assert [pr.number for pr in forge.list_prs("open")] == [ui_repo.pr]
