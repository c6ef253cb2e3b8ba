"""What the cluster must allow, read from the rendered manifests (`workflows.preconditions`,
reported by `mlops workflows lint`): issue 42, item 5.

The Pod Security checks follow kubernetes/pod-security-admission `policy/check_*.go`
(capabilities_baseline's allowed set, restrictedVolumes' volume types, runAsNonRoot's pod
and container rule, seccompProfile_restricted's RuntimeDefault/Localhost, and the rest);
the injected containers are Argo's argoexec (v3.7.9 workflow/controller/workflowpod.go
newExecContainer: the ConfigMap's `executor` resources and securityContext, Argo's minimal
context for a resource template) and paddle-operator's `coord-paddle` (v0.3.5
controllers/paddlejob_helper.go genCoordinateInitContainer: no securityContext, 10m/10m
requests, no limits; main.go `--initImage` default docker.io/library/alpine:3.10).
"""

from __future__ import annotations

import pathlib

from cogs.pods import container_security, pod_security
from mlops.cli import main as cli
from serving import manifests
from workflows.config import load_config
from workflows.preconditions import (
    PodSpec,
    data_lock_findings,
    image_findings,
    pod_specs,
    psa_findings,
    psa_violations,
    resource_findings,
)
from workflows.render import render_documents
from workflows.settings import load_settings

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shapes-detector"
RESTRICTED_EXECUTOR = {
    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                  "limits": {"cpu": "500m", "memory": "512Mi"}},
    "securityContext": {"runAsNonRoot": True, "runAsUser": 8737,
                        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"}},
}


def _docs():
    rendered = render_documents(load_config(EXAMPLE), load_settings())
    return [d for docs in rendered.values() for d in docs]


def _pod(*containers, **spec):
    return PodSpec("pod", "ns", spec, tuple(containers))


def test_a_pod_of_ours_meets_restricted_and_each_widening_is_named():
    ours = _pod({"name": "c", "securityContext": container_security()},
                securityContext=pod_security(1000), volumes=[{"name": "v", "emptyDir": {}}])
    assert psa_violations(ours) == {"baseline": [], "restricted": []}
    # istio-init without Istio CNI: NET_ADMIN and NET_RAW are beyond baseline's set
    istio_init = _pod({"name": "istio-init", "securityContext": {
        "capabilities": {"add": ["NET_ADMIN", "NET_RAW"], "drop": ["ALL"]},
        "runAsUser": 0, "runAsNonRoot": False, "allowPrivilegeEscalation": False}},
        securityContext=pod_security(1000))
    assert psa_violations(istio_init)["baseline"] == [
        "istio-init: adds capabilities NET_ADMIN, NET_RAW"]
    # nothing set at all: baseline, not restricted
    bare = _pod({"name": "c"})
    found = psa_violations(bare)
    assert found["baseline"] == [] and "c: allowPrivilegeEscalation not false" in found[
        "restricted"] and "c: no RuntimeDefault seccompProfile" in found["restricted"]
    host = _pod({"name": "c"}, hostNetwork=True, volumes=[{"name": "h", "hostPath": {}}])
    assert psa_violations(host)["baseline"] == ["hostNetwork: true", "volume h: hostPath"]
    nfs = _pod({"name": "c", "securityContext": container_security()},
               securityContext=pod_security(1000), volumes=[{"name": "n", "nfs": {}}])
    assert psa_violations(nfs) == {"baseline": [], "restricted": ["volume n: nfs"]}


def test_the_pipeline_namespace_needs_privileged_for_build_image_alone():
    """B6: under `baseline` build-image (seccomp and AppArmor Unconfined) is refused; with
    the guide's executor settings every other pod of the pipeline meets `restricted` but for
    paddle-operator's init container, which meets `baseline`."""
    pods = pod_specs(_docs(), argo_executor=RESTRICTED_EXECUTOR)
    text = [str(f) for f in psa_findings(pods)]
    assert "pod security: note: namespace mlops: enforce=privileged or looser" in text
    privileged = [t for t in text if " is privileged" in t]
    assert len(privileged) == 1 and "build-image" in privileged[0]
    assert not any(" is baseline" in t for t in text), text  # the documents' own pods
    assert any(t.startswith("pod security: note:   paddle-operator's init container")
               for t in text)
    assert not any("Argo's executor" in t for t in text)
    # without the executor settings, Argo's containers are what keeps it from restricted
    bare = [str(f) for f in psa_findings(pod_specs(_docs()))]
    assert any("Argo's executor" in t and "allowPrivilegeEscalation not false" in t
               for t in bare)


def test_requests_are_reported_where_they_are_missing():
    """B8: every container the documents render requests and limits CPU and memory; what
    Argo and paddle-operator inject is reported once per origin; a container without is
    named."""
    pods = pod_specs(_docs())
    text = [str(f) for f in resource_findings(pods)]
    assert text[0] == ("resources: every container of the documents requests and limits "
                       "CPU and memory")
    assert any("Argo's executor" in t for t in text)
    configured = [str(f) for f in resource_findings(
        pod_specs(_docs(), argo_executor=RESTRICTED_EXECUTOR, paddle_init_image=""))]
    assert configured == [text[0]]
    missing = [str(f) for f in resource_findings([_pod({"name": "c", "resources": {
        "requests": {"cpu": "1"}}})])]
    assert missing[1] == ("resources: warning:   pod container c lacks requests.memory, "
                          "limits.cpu, limits.memory")


def test_images_are_listed_with_their_registry_and_mutable_tags():
    pods = pod_specs(_docs())
    text = "\n".join(str(f) for f in image_findings(pods))
    assert "moby/buildkit:v0.23.2-rootless (from docker.io" in text
    assert "docker.io/library/alpine:3.10 (from docker.io" in text  # paddle-operator's init
    assert "{{" not in text  # the per-commit image is pushed and run by digest
    pinned = _pod({"name": "c", "image": "registry.example.com/x@sha256:" + "a" * 64})
    (finding,) = image_findings([pinned])
    assert finding.level == "ok"


def test_a_serving_deployment_meets_restricted():
    doc = manifests.deployment("shapes", "v1", image="registry.example.com/s:1",
                               model_uri="file:///models/shapes/v1", weights_sha256="a" * 64,
                               namespace="models")
    (pod,) = pod_specs([doc])
    assert psa_violations(pod) == {"baseline": [], "restricted": []}


def test_a_lock_the_repo_lacks_is_a_warning(tmp_path):
    """B5: `data:` naming a lock the repo does not hold fails prepare-data on every run."""
    (tmp_path / "data").mkdir()
    locks = {"train": "data/shapes.lock", "val": "data/shapes.lock"}
    (warning,) = data_lock_findings(tmp_path, locks)
    assert warning.level == "warning" and "data.train, data.val name data/shapes.lock" in \
        warning.text and "mlops data snapshot SOURCE --out data/shapes.lock" in warning.text
    (tmp_path / "data" / "shapes.lock").write_text("{}")
    (ok,) = data_lock_findings(tmp_path, locks)
    assert ok.level == "ok"


def test_lint_reports_the_preconditions(tmp_path, capsys):
    out = tmp_path / "manifests"
    assert cli(["workflows", "render", str(EXAMPLE), "--out", str(out)]) == 0
    config = tmp_path / "cm.yaml"
    config.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: w}\ndata:\n"
                      "  executor: |\n    securityContext: {runAsNonRoot: true}\n")
    capsys.readouterr()
    assert cli(["workflows", "lint", str(out), "--repo", str(EXAMPLE),
                "--argo-config", str(config)]) == 0
    printed = capsys.readouterr().out
    assert "preconditions (what the cluster must allow" in printed
    assert "data.train, data.val, data.holdout name data/shapes.lock" in printed
    # judged with that executor: runAsNonRoot set, escalation still allowed
    assert "Argo's executor" in printed and "runAsNonRoot not true" not in printed
    config.write_text("data:\n  executor: [1, 2]\n")
    assert cli(["workflows", "lint", str(out), "--argo-config", str(config)]) != 0
    assert "data.executor is not a mapping" in capsys.readouterr().err
