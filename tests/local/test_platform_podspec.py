"""The Deployment the GitOps repo holds becomes the local server's command line (pure).

The serving room's own builder renders the Deployment; nothing here starts a
process. The real-platform behaviour (a changed arg restarts the server with
it, a wrong probe path never gets traffic, the cluster-latency delays) is in
tests/local/test_platform_deployment.py.
"""

import copy

import pytest

from gitops.layout import ModelState
from local.platform import podspec
from local.platform.desired import _Broken, spec_from_state
from serving import manifests

SHA = "a" * 64


def _deployment(**kwargs):
    return manifests.deployment("shapes", "v-1", image="reg/mlops:1", model_uri="file:///m/v-1",
                                weights_sha256=SHA, **kwargs)


def test_the_rendered_container_runs_with_mapped_paths_port_and_host():
    pod = podspec.local_pod(_deployment(), source="apps/shapes/deployment-v-1.yaml",
                            model_dir="/local/models/v-1", port=45678, scratch="/w/scratch/s")
    assert pod.argv[1:3] == ("-m", "mlops")  # `mlops` from this environment, image ignored
    assert list(pod.argv[3:]) == ["serve", "/local/models/v-1", "--port", "45678",
                                  "--host", "127.0.0.1", "--model-name", "shapes",
                                  "--model-version", "v-1", "--weights-sha256", SHA]
    assert pod.env["HOME"] == "/w/scratch/s/tmp"  # HOME=/tmp, the emptyDir at /tmp
    assert pod.scratch_dirs == ("/w/scratch/s/tmp",)
    # The readiness probe as written, on the mapped port; the startup probe's budget.
    assert pod.readiness == podspec.Probe(path="/v2/health/ready", port=45678, period=5.0,
                                          timeout=1.0, success_threshold=1, failure_threshold=2)
    assert pod.start_timeout == 120.0 and pod.start_period == 2.0


def test_env_references_in_args_are_expanded_as_the_kubelet_does():
    doc = _deployment()
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container["env"].append({"name": "INFLIGHT", "value": "7"})
    container["args"] += ["--max-in-flight", "$(INFLIGHT)", "--log-level", "$(UNSET)"]
    pod = podspec.local_pod(doc, source="d.yaml", model_dir="/m", port=1, scratch="/s")
    assert pod.argv[-4:] == ("--max-in-flight", "7", "--log-level", "$(UNSET)")


@pytest.mark.parametrize("change, message", [
    (lambda c: c.pop("command") and c.pop("args"), "no command or args"),
    (lambda c: c["readinessProbe"].update(httpGet=None, exec={"command": ["true"]}),
     "only httpGet probes run locally"),
    (lambda c: c["readinessProbe"]["httpGet"].update(port="grpc"),
     "names port 'grpc', which the container does not declare"),
    (lambda c: c.update(args=["serve", "/models/shapes/v-1"]),
     "do not pass its containerPort"),
])
def test_a_container_that_cannot_run_is_a_clear_error_naming_the_file(change, message):
    doc = _deployment()
    change(doc["spec"]["template"]["spec"]["containers"][0])
    with pytest.raises(podspec.PodSpecError, match=message) as err:
        podspec.local_pod(doc, source="apps/shapes/deployment-v-1.yaml", model_dir="/m", port=1,
                          scratch="/s")
    assert str(err.value).startswith("apps/shapes/deployment-v-1.yaml: ")


def test_a_changed_pod_template_is_a_new_pod():
    doc = _deployment()
    changed = copy.deepcopy(doc)
    changed["spec"]["template"]["spec"]["containers"][0]["args"] += ["--threads", "2"]
    assert podspec.pod_digest(doc) != podspec.pod_digest(changed)
    replicas = copy.deepcopy(doc)
    replicas["spec"]["replicas"] = 3  # not the pod template: no restart
    assert podspec.pod_digest(doc) == podspec.pod_digest(replicas)


def test_the_reader_refuses_a_deployment_that_cannot_run_and_names_it():
    doc = _deployment()
    doc["spec"]["template"]["spec"]["containers"][0].pop("args")
    doc["spec"]["template"]["spec"]["containers"][0].pop("command")
    state = ModelState(model="shapes", deployments={"v-1": doc})
    with pytest.raises(_Broken) as err:
        spec_from_state(state)
    assert err.value.file == "apps/shapes/deployment-v-1.yaml"
