"""`mlops workflows submit` against a recording stand-in for the Argo Server.

The Argo Server cannot run here (it needs a Kubernetes API server and the
workflow controller), so this test serves the few endpoints Hera's
WorkflowsService calls from a local HTTP server that records each request
and answers like Argo does (409 AlreadyExists for a duplicate name). What
is asserted is what we send: one valid Workflow with the commit's pipeline
inline (as a push's submit step creates it: workflows/push.py), the commit's
parameters, and the token from the environment; no shared WorkflowTemplate,
which two submits in flight would race on.
"""

import http.server
import json
import threading

import pytest

from mlops.cli import main as cli
from tests.fixtures.workflows import git
from tests.manifest_validation import validate_manifest


class _ArgoStandIn(http.server.BaseHTTPRequestHandler):
    requests: list  # set per server
    objects: dict

    def log_message(self, *args):
        pass

    def _reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self, body=None):
        self.server.requests.append(
            {
                "method": self.command,
                "path": self.path,
                "auth": self.headers.get("Authorization"),
                "body": json.loads(json.dumps(body)),
            }
        )

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._record(body)
        kind = "template" if "workflow-templates" in self.path else "workflow"
        obj = body[kind]
        key = (kind, obj["metadata"]["name"])
        if key in self.server.objects:
            return self._reply(409, {"code": 6, "message": f"{key[1]} already exists"})
        obj["metadata"]["resourceVersion"] = "1"
        obj["metadata"]["uid"] = "00000000-0000-0000-0000-000000000001"
        self.server.objects[key] = obj
        self._reply(200, obj)

    def do_GET(self):
        self._record()
        name = self.path.split("?")[0].rstrip("/").split("/")[-1]
        obj = self.server.objects.get(("template", name))
        self._reply(200, obj) if obj else self._reply(404, {"code": 5, "message": "not found"})

    def do_PUT(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._record(body)
        obj = body["template"]
        obj["metadata"]["resourceVersion"] = "2"
        self.server.objects[("template", obj["metadata"]["name"])] = obj
        self._reply(200, obj)


@pytest.fixture
def argo_server(port):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _ArgoStandIn)
    server.requests = []
    server.objects = {}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_submit_sends_the_commits_pipeline_inline(
    fake_model_repo, argo_server, monkeypatch, capsys
):
    monkeypatch.setenv("ARGO_TOKEN", "s3cret-token")
    git(
        fake_model_repo, "remote", "add", "origin", "https://git.example.com/team/fake-detector.git"
    )
    sha = git(fake_model_repo, "rev-parse", "HEAD")
    url = f"http://127.0.0.1:{argo_server.server_port}"
    assert (
        cli(
            ["workflows", "submit", str(fake_model_repo), "--argo-server", url, "--namespace", "ml"]
        )
        == 0
    )
    assert f"Workflow ml/fake-detector-{sha[:12]}: submitted" in capsys.readouterr().out

    posts = [r for r in argo_server.requests if r["method"] == "POST"]
    assert [r["path"] for r in posts] == ["/api/v1/workflows/ml"]  # no template written
    assert all(r["auth"] == "Bearer s3cret-token" for r in argo_server.requests)
    workflow = posts[0]["body"]["workflow"]
    validate_manifest({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", **workflow})
    assert workflow["metadata"]["name"] == f"fake-detector-{sha[:12]}"
    assert workflow["metadata"]["namespace"] == "ml"
    assert workflow["metadata"]["labels"]["mlops.dev/trigger"] == "cli"
    assert "workflowTemplateRef" not in workflow["spec"]
    # the pipeline rendered from this checkout, whole: the DAG and its training template
    names = {t["name"] for t in workflow["spec"]["templates"]}
    assert {"checkout", "train", "evaluate", "gate", "propose"} <= names
    params = {p["name"]: p.get("value") for p in workflow["spec"]["arguments"]["parameters"]}
    assert {k: params[k] for k in ("repo", "revision", "ref")} == {
        "repo": "https://git.example.com/team/fake-detector.git",
        "revision": sha,
        "ref": "refs/heads/main",
    }


def test_second_submit_of_a_commit_starts_nothing_new(fake_model_repo, argo_server, capsys):
    url = f"http://127.0.0.1:{argo_server.server_port}"
    args = [
        "workflows",
        "submit",
        str(fake_model_repo),
        "--argo-server",
        url,
        "--repo-url",
        "https://git.example.com/x.git",
    ]
    assert cli(args) == 0
    capsys.readouterr()
    assert cli(args) == 0
    assert "already submitted for this commit" in capsys.readouterr().out
    assert [r for r in argo_server.requests if r["method"] == "PUT"] == []
    workflows = [k for k in argo_server.objects if k[0] == "workflow"]
    assert len(workflows) == 1


def test_submit_needs_a_clone_url(fake_model_repo, argo_server, capsys):
    url = f"http://127.0.0.1:{argo_server.server_port}"
    assert cli(["workflows", "submit", str(fake_model_repo), "--argo-server", url]) == 2
    assert "pass --repo-url" in capsys.readouterr().err
    assert argo_server.requests == []


def test_unreachable_server_is_a_clear_error(fake_model_repo, port, capsys):
    code = cli(
        [
            "workflows",
            "submit",
            str(fake_model_repo),
            "--argo-server",
            f"http://127.0.0.1:{port}",
            "--repo-url",
            "https://git.example.com/x.git",
        ]
    )
    assert code == 8  # ExitCode.UNAVAILABLE: try again when the server is up
    err = capsys.readouterr().err
    assert "cannot connect" in err and "Traceback" not in err
