"""The Runs page in a cluster: Workflows read from an Argo Server's API (a stand-in here)."""

from __future__ import annotations

import argparse
import http.server
import json
import threading
import urllib.parse

import pytest
from starlette.testclient import TestClient

from mlops.commands.ui import register, ui_config
from mlops.ui.app import UiConfig, create_app
from mlops.ui.argo import ArgoRuns, pod_name

WF = {
    "metadata": {"name": "train-abc12", "creationTimestamp": "2026-11-25T10:00:00Z"},
    "status": {
        "phase": "Running", "startedAt": "2026-11-25T10:00:00Z",
        "nodes": {
            "train-abc12": {"id": "train-abc12", "type": "DAG", "phase": "Running"},
            "train-abc12-111": {
                "id": "train-abc12-111", "type": "Pod", "displayName": "evaluate",
                "templateName": "evaluate", "phase": "Succeeded",
                "startedAt": "2026-11-25T10:05:00Z", "finishedAt": "2026-11-25T10:05:30Z",
                "outputs": {"parameters": [{"name": "map50", "value": "0.91"},
                                           {"name": "passed", "value": "true"}]}},
            "train-abc12-222": {
                "id": "train-abc12-222", "type": "Pod", "displayName": "train",
                "templateName": "train", "phase": "Succeeded",
                "startedAt": "2026-11-25T10:01:00Z", "finishedAt": "2026-11-25T10:04:00Z"},
            "train-abc12-333": {
                "id": "train-abc12-333", "type": "Pod", "displayName": "propose",
                "templateName": "propose", "phase": "Running",
                "startedAt": "2026-11-25T10:06:00Z"},
        },
    },
}


def _second_run() -> dict:
    """A finished retrain of the same model: another learning rate, a refused gate."""
    nodes = {
        "train-def34-1": {"id": "train-def34-1", "type": "Pod", "displayName": "train",
                          "phase": "Succeeded", "startedAt": "2026-11-26T10:01:00Z",
                          "finishedAt": "2026-11-26T10:05:00Z"},
        "train-def34-2": {"id": "train-def34-2", "type": "Pod", "displayName": "evaluate",
                          "phase": "Succeeded", "startedAt": "2026-11-26T10:05:00Z",
                          "finishedAt": "2026-11-26T10:05:20Z",
                          "outputs": {"parameters": [{"name": "map50", "value": "0.72"},
                                                     {"name": "version", "value": "v-2"}]}},
        "train-def34-3": {"id": "train-def34-3", "type": "Pod", "displayName": "gate",
                          "phase": "Succeeded", "startedAt": "2026-11-26T10:05:20Z",
                          "finishedAt": "2026-11-26T10:05:21Z",
                          "outputs": {"parameters": [{"name": "passed", "value": "false"}]}},
    }
    return {"metadata": {"name": "train-def34"},
            "spec": {"arguments": {"parameters": [{"name": "revision", "value": "def34"},
                                                  {"name": "lr", "value": "0.002"}]}},
            "status": {"phase": "Succeeded", "startedAt": "2026-11-26T10:00:00Z",
                       "finishedAt": "2026-11-26T10:06:00Z", "nodes": nodes}}


BY_NAME = {"train-abc12": {**WF, "spec": {"arguments": {"parameters": [
    {"name": "revision", "value": "abc12"}, {"name": "lr", "value": "0.004"}]}}},
    "train-def34": _second_run()}


@pytest.fixture
def argo_server():
    seen: list[tuple[str, dict, str | None]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            url = urllib.parse.urlparse(self.path)
            query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
            seen.append((url.path, query, self.headers.get("Authorization")))
            if url.path == "/api/v1/workflows/ml":
                body = json.dumps({"items": [WF]})
            elif url.path.removeprefix("/api/v1/workflows/ml/") in BY_NAME:
                body = json.dumps(BY_NAME[url.path.removeprefix("/api/v1/workflows/ml/")])
            elif url.path == "/api/v1/workflows/ml/train-abc12/log":
                body = "\n".join(json.dumps({"result": {"content": line}})
                                 for line in ("step=10 loss=0.5", "done"))
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()


def test_workflows_become_runs_with_steps_outputs_and_logs(argo_server):
    url, seen = argo_server
    argo = ArgoRuns(url, "ml", token="t0k")
    now = 1_795_601_220.0  # 2026-11-25T10:07:00Z
    run = argo.runs(now=now)[0]
    assert run["status"] == "Running" and run["task"] == "propose"
    assert [(s["task"], s["state"], s["seconds"]) for s in run["steps"]] == [
        ("train", "Succeeded", 180.0), ("evaluate", "Succeeded", 30.0),
        ("propose", "Running", 60.0)]
    assert run["gate"] == "passed" and run["steps"][1]["outputs"]["map50"] == "0.91"
    assert run["steps"][0]["log"] == "argo:train-abc12/train-abc12-train-222"
    assert argo.log(run["steps"][0]["log"]) == "step=10 loss=0.5\ndone"
    assert seen[-1][1] == {"podName": "train-abc12-train-222", "logOptions.container": "main"}
    assert seen[0][2] == "Bearer t0k"


def test_the_page_reads_runs_from_argo_and_says_when_it_is_down(argo_server, tmp_path):
    url, _ = argo_server
    config = UiConfig(gitops=str(tmp_path / "none.git"), argo_server=url, argo_namespace="ml")
    with TestClient(create_app(config)) as c:
        assert c.get("/api/runs").json()["runs"][0]["name"] == "train-abc12"
        log = c.get("/api/log", params={"path": "argo:train-abc12/train-abc12-train-222"})
        assert log.text == "step=10 loss=0.5\ndone"
    config.argo_server = "http://127.0.0.1:9"
    with TestClient(create_app(config)) as c:
        res = c.get("/api/runs")
    assert res.status_code == 503 and "unreachable" in res.json()["error"]


def test_pod_names_follow_argo_v2_naming():
    assert pod_name("wf", {"id": "wf-42", "templateName": "train"}) == "wf-train-42"
    assert pod_name("wf", {"id": "other"}) == "other"


# -- an Argo Server as installed (issue 25, defect 3): TLS, client auth, the pipeline's
# namespace. `argo_tls` (tests/fixtures/ui.py) is a stand-in for argo-server, a
# Kubernetes-hosted service that cannot run here; its docstring cites the upstream sources.

def test_runs_and_logs_over_tls_with_the_ca_and_the_token(argo_tls, tmp_path, monkeypatch):
    monkeypatch.setenv("ARGO_TOKEN", argo_tls.token)  # as the Secret puts it in the pod
    config = UiConfig(gitops=str(tmp_path / "none.git"), argo_server=argo_tls.url,
                      argo_namespace=argo_tls.namespace, argo_ca=str(argo_tls.ca))
    with TestClient(create_app(config)) as c:
        res = c.get("/api/runs")
        assert res.status_code == 200, res.text
        runs = res.json()["runs"]
        assert [(r["name"], r["status"]) for r in runs] == [("train-abc12", "Succeeded")]
        log = c.get("/api/log", params={"path": runs[0]["steps"][0]["log"]})
        assert log.text == "step=10 loss=0.5\ndone"
    assert {auth for _, _, auth in argo_tls.seen} == {f"Bearer {argo_tls.token}"}


def test_each_refusal_of_the_argo_server_says_what_to_give(argo_tls, tmp_path, monkeypatch):
    monkeypatch.delenv("ARGO_TOKEN", raising=False)
    base = {"gitops": str(tmp_path / "none.git"), "argo_server": argo_tls.url,
            "argo_namespace": argo_tls.namespace}

    def runs(**config):
        with TestClient(create_app(UiConfig(**{**base, **config}))) as c:
            return c.get("/api/runs")

    untrusted = runs()  # the system's CAs do not know a self-signed certificate
    assert untrusted.status_code == 503 and "--argo-ca" in untrusted.json()["error"]
    assert argo_tls.seen == []  # nothing was sent over a connection we could not trust
    anonymous = runs(argo_ca=str(argo_tls.ca))
    assert anonymous.status_code == 503
    assert "refused no token (HTTP 401)" in anonymous.json()["error"]
    monkeypatch.setenv("ARGO_TOKEN", "Bearer someone-else")
    wrong = runs(argo_insecure=True)  # asked for by name: no check of the certificate
    assert "refused the token (HTTP 401)" in wrong.json()["error"]
    assert argo_tls.seen[-1][2] == "Bearer someone-else"
    monkeypatch.setenv("ARGO_TOKEN", argo_tls.token)
    assert runs(argo_insecure=True).json()["runs"][0]["name"] == "train-abc12"


def test_the_workflows_namespace_is_the_pipelines(tmp_path):
    """`mlops ui` looks where the pipeline's Workflows run: the settings' namespace
    (docs/cluster.md section 6 renders them into `mlops`), not Argo's own `argo`."""

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    base = ["ui", "--gitops", str(tmp_path / "g.git"), "--workdir", str(tmp_path / "none")]
    assert ui_config(parser.parse_args(base)).argo_namespace == "mlops"
    settings = tmp_path / "settings.yaml"
    settings.write_text("namespace: vision-ml\n")
    args = parser.parse_args([*base, "--settings", str(settings)])
    assert ui_config(args).argo_namespace == "vision-ml"
    args = parser.parse_args([*base, "--settings", str(settings), "--argo-namespace", "x"])
    assert ui_config(args).argo_namespace == "x"


def test_two_workflows_compared_side_by_side(argo_server, tmp_path):
    """Runs compared in a cluster (issue 32 item 2): each Workflow's arguments, the
    evaluate step's outputs, the gate's verdict, each step's duration and the train
    step's loss (from its log), through the Argo Server's API."""
    url, seen = argo_server
    config = UiConfig(gitops=str(tmp_path / "none.git"), argo_server=url, argo_namespace="ml")
    with TestClient(create_app(config)) as c:
        doc = c.get("/api/compare", params=[("run", "argo:train-abc12"),
                                            ("run", "argo:train-def34")]).json()
        res = c.get("/api/compare", params=[("run", "argo:train-abc12"), ("run", "argo:x/y")])
    rows = {f"{r['section']}.{r['key']}": r for r in doc["rows"]}
    assert [r["name"] for r in doc["runs"]] == ["train-abc12", "train-def34"]
    assert rows["parameters.lr"]["values"] == ["0.004", "0.002"]
    assert rows["parameters.lr"]["differs"]
    assert rows["metrics.map50"]["values"] == [0.91, 0.72]
    assert rows["gate.passed"]["values"] == [True, False]
    assert rows["durations.train"]["values"] == [180.0, 240.0]
    assert rows["durations.total"]["values"] == [None, 360.0]  # the first is still running
    assert doc["loss"] == [[[10, 0.5]], []]
    assert ("/api/v1/workflows/ml/train-abc12", {}, None) in seen
    assert res.status_code == 400 and "not a workflow name" in res.json()["error"]
