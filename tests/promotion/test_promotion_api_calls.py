"""The controller's declared Kubernetes API calls are the ones its code sends.

`promotion/cluster/argocd.py` and `promotion/cluster/readiness.py` list their calls as
`API_CALLS`; `workflows.identity` holds those lists against the controller's
Roles. Here the official Kubernetes client talks to a recording stand-in for
the API server on a loopback port (no Kubernetes API server can run on this
machine): every request it receives, read as RBAC reads it
(`contracts.kubeapi.request_call`, after the API server's requestinfo.go),
must be in the list, and every listed call must have been sent.
"""

import pathlib
import re

import pytest

from contracts.kubeapi import request_call
from promotion.cluster import argocd, readiness
from tests.fixtures.kubeapi import api_stand_in
from tests.rooms import ROOMS

MODEL = "shapes-detector"
VALUES = {"model": MODEL, "version": "v2", "argocd_namespace": "argocd",
          "models_namespace": "models"}


@pytest.fixture
def api_server():
    """Answers every request with an empty object (200) and records it."""
    with api_stand_in(lambda *_: (200, {"metadata": {}, "spec": {}, "status": {}})) as served:
        yield served


def _sent(seen):
    return {request_call(method, path) for method, path, _ in seen}


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
    users = {str(p.relative_to(root)) for pkg in ROOMS for p in (root / pkg).rglob("*.py")
             if re.search(r"^\s*(from kubernetes[ .]|import kubernetes\b)", p.read_text(), re.M)}
    # and the push Workflow's submitter (tests/workflows/test_push_submit.py records it)
    assert users == {"promotion/cluster/argocd.py", "promotion/cluster/readiness.py",
                     "workflows/steps/submit_pipeline.py"}
