"""The controller's declared Kubernetes API calls are the ones its code sends.

`promotion/cluster/argocd.py` and `promotion/cluster/readiness.py` list their calls as
`API_CALLS`; `workflows.identity` holds those lists against the controller's
Roles. Here the official Kubernetes client talks to a recording stand-in for
the API server on a loopback port (no Kubernetes API server can run on this
machine): every request it receives, read as RBAC reads it
(`contracts.kubeapi.request_call`, after the API server's requestinfo.go),
must be in the list, and every listed call must have been sent.
"""

import http.server
import json
import pathlib
import re
import threading

import pytest

from contracts.kubeapi import request_call
from promotion.cluster import argocd, readiness

MODEL = "shapes-detector"
VALUES = {"model": MODEL, "version": "v2", "argocd_namespace": "argocd",
          "models_namespace": "models"}


@pytest.fixture
def api_server():
    """Answers every request with an empty object (200) and records (method, path)."""
    seen: list[tuple[str, str]] = []

    class Api(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            seen.append((self.command, self.path))
            payload = json.dumps({"metadata": {}, "spec": {}, "status": {}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", seen
    finally:
        server.shutdown()
        server.server_close()


def _sent(seen):
    return {request_call(method, path) for method, path in seen}


def test_the_argo_cd_refresher_sends_exactly_its_declared_calls(api_server):
    url, seen = api_server
    assert argocd.ArgoRefresher("argocd", host=url).refresh(MODEL)
    assert _sent(seen) == {c.bind(VALUES) for c in argocd.API_CALLS}


def test_the_readiness_check_sends_exactly_its_declared_calls(api_server):
    # lazy (collection cost): kubernetes loads only when this runs
    from kubernetes import client

    url, seen = api_server
    check = readiness.KubernetesReadiness(
        "models", api_client=client.ApiClient(client.Configuration(host=url)))
    check.check(MODEL, "v2", None)
    check.routed(MODEL, {"v1": 90, "v2": 10})
    assert _sent(seen) == {c.bind(VALUES) for c in readiness.API_CALLS}


def test_no_other_module_talks_to_the_kubernetes_api():
    """The two lists above are all the controller asks: only these modules use the client."""

    root = pathlib.Path(__file__).resolve().parents[2]
    users = {str(p.relative_to(root)) for pkg in ("mlops", "local", "promotion", "serving",
                                                  "gitops", "workflows", "contracts", "cogs")
             for p in (root / pkg).rglob("*.py")
             if re.search(r"^\s*(from kubernetes[ .]|import kubernetes\b)", p.read_text(), re.M)}
    # and the push Workflow's submitter (tests/workflows/test_push_submit.py records it)
    assert users == {"promotion/cluster/argocd.py", "promotion/cluster/readiness.py",
                     "workflows/steps/submit_pipeline.py"}
