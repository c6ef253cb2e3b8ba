"""Every pod the project renders, walked for its security context (issue 16, finding 11).

Step pods (the WorkflowTemplate's container templates under its pod-level
securityContext), PaddleJob workers, the serving Deployment and the
controller: non-root, RuntimeDefault seccomp, no privilege escalation, all
capabilities dropped, a read-only root, and no API token unless the pod
uses the API. The exceptions are listed with their reason; anything else
that widens fails here.
"""

from __future__ import annotations

import pathlib

import yaml

from promotion.cluster.deploy import controller_manifests
from serving import manifests
from workflows.config import load_config
from workflows.pipeline import build_workflow_template
from workflows.settings import PipelineSettings

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: container -> why its root filesystem stays writable
WRITABLE_ROOT = {
    "build-image": "rootless BuildKit unpacks and snapshots layers under its own root",
    "paddle": "the model repo's training code is the user's; its image decides where it writes",
}
#: container -> why it runs unconfined
UNCONFINED = {"build-image": "rootless BuildKit needs user namespaces (seccomp/AppArmor)"}
#: container -> why it may gain privileges and keeps its capabilities
ESCALATES = {"build-image": "rootless BuildKit maps its user namespace with the setuid "
                            "newuidmap/newgidmap (BuildKit's docs/rootless.md)"}
#: pods that talk to the Kubernetes API, and so mount a token (the PaddleJob templates'
#: argoexec gets its executor token from Argo, not from the pod: workflows.identity and
#: tests/workflows/test_workflows_identity.py check every pod's token against its calls)
API_PODS = {"mlops-controller"}


def _pods() -> list[tuple[str, dict, list[dict]]]:
    """(name, pod-level spec, containers) of every pod the project renders."""
    doc = build_workflow_template(load_config(ROOT / "examples" / "shapes-detector"),
                                  PipelineSettings()).to_dict()
    spec = doc["spec"]
    pods = []
    for tmpl in spec["templates"]:
        pod = {"securityContext": spec["securityContext"],
               "automountServiceAccountToken": tmpl.get(
                   "automountServiceAccountToken", spec.get("automountServiceAccountToken"))}
        if "container" in tmpl:
            pods.append((tmpl["name"], pod, [tmpl["container"]]))
        elif "resource" in tmpl:
            pods.append((tmpl["name"], pod, []))  # argoexec applies the job: Argo's image
            job = yaml.safe_load(tmpl["resource"]["manifest"])
            worker = job["spec"]["worker"]["template"]["spec"]
            pods.append((f"{tmpl['name']}-worker", worker, worker["containers"]))
    serving = manifests.deployment("shapes", "v1", image="i", model_uri="file:///m",
                                   weights_sha256="a" * 64)["spec"]["template"]["spec"]
    pods.append(("serving", serving, serving["containers"]))
    controller = next(d for d in controller_manifests(gitops_url="https://g/r.git",
                                                      prometheus_url="http://p:9090")
                      if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    pods.append(("mlops-controller", controller, controller["containers"]))
    return pods


def test_every_pod_runs_restricted():
    pods = _pods()
    assert {"checkout", "build-image", "evaluate", "gate", "propose", "train-worker",
            "serving", "mlops-controller"} <= {name for name, _, _ in pods}
    for name, pod, containers in pods:
        ctx = pod.get("securityContext") or {}
        assert ctx.get("runAsNonRoot") is True, name
        assert ctx.get("seccompProfile") == {"type": "RuntimeDefault"}, name
        token = pod.get("automountServiceAccountToken")
        if name in API_PODS:
            assert token is not False, name
        else:
            assert token is False, f"{name} mounts an API token it never uses"
        for container in containers:
            c = container.get("securityContext") or {}
            cname = container.get("name", name)
            if name not in ESCALATES:
                assert c.get("allowPrivilegeEscalation") is False, (name, cname)
                assert c.get("capabilities", {}).get("drop") == ["ALL"], (name, cname)
            assert not c.get("privileged"), (name, cname)
            if name not in WRITABLE_ROOT and cname not in WRITABLE_ROOT:
                assert c.get("readOnlyRootFilesystem") is True, (name, cname)
            profile = (c.get("seccompProfile") or {}).get("type")
            if profile is not None and name not in UNCONFINED:
                assert profile == "RuntimeDefault", (name, cname)


def test_the_exceptions_are_the_ones_listed():
    """A new writable root or an unconfined container must be added above, with a reason."""
    seen_writable, seen_unconfined, seen_escalating = set(), set(), set()
    for name, _, containers in _pods():
        for container in containers:
            c = container.get("securityContext") or {}
            if not c.get("readOnlyRootFilesystem"):
                seen_writable.add(name if name in WRITABLE_ROOT else container.get("name", name))
            if (c.get("seccompProfile") or {}).get("type") == "Unconfined":
                seen_unconfined.add(name)
            if c.get("allowPrivilegeEscalation") is not False:
                seen_escalating.add(name)
    assert seen_writable == set(WRITABLE_ROOT)
    assert seen_unconfined == set(UNCONFINED)
    assert seen_escalating == set(ESCALATES)
