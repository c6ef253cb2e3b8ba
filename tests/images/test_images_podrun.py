"""mlops.images.podrun: a rendered pod's container -> `podman run` argv (pure, no podman).

The manifests are the ones the project renders (serving Deployment, the
controller's and the UI's Deployments, the pipeline's PaddleJob); the image
tier (tests/images/test_images.py) runs the same argv for real.
"""

import json
import pathlib
import shutil

import pytest
import yaml

from mlops.images.podman import PodmanMissing, Store, require_tools
from mlops.images.podrun import PodRunError, podman_run_argv, tmpfs_size
from mlops.images.runner import paddlejob_workers
from promotion.cluster.deploy import controller_manifests
from serving import manifests
from workflows.config import load_config
from workflows.paddlejob import paddlejob_manifest
from workflows.settings import PipelineSettings

SHA = "a" * 64
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _pairs(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def _serving_pod(**kw):
    dep = manifests.deployment("shapes-detector", "v-1", image="reg/serve:1",
                               model_uri="file:///m", weights_sha256=SHA, port=8080, **kw)
    return dep["spec"]["template"]["spec"]


def test_the_serving_deployment_keeps_its_security_context_volumes_and_command():
    argv = podman_run_argv(_serving_pod(), image="img", name="s", source="dep",
                           claims={"mlops-models": "/srv/models"}, network="host")
    assert argv[:3] == ["run", "--rm", "--pull=never"]
    assert _pairs(argv, "--user") == ["1000:1000"]
    assert _pairs(argv, "--group-add") == ["1000"]  # fsGroup
    assert "--read-only" in argv and "--read-only-tmpfs=false" in argv
    assert _pairs(argv, "--security-opt") == ["no-new-privileges"]
    assert "--cap-drop=all" in argv
    assert _pairs(argv, "--volume") == ["/srv/models:/models:ro"]  # the claim is read-only
    assert _pairs(argv, "--tmpfs") == [
        f"/tmp:rw,exec,nosuid,nodev,mode=1777,size={2**30}"]  # emptyDir sizeLimit 1Gi
    assert _pairs(argv, "--env") == ["HOME=/tmp"]
    assert json.loads(_pairs(argv, "--entrypoint")[0]) == ["mlops"]
    image_at = argv.index("img")
    assert argv[image_at + 1:image_at + 3] == ["serve", "/models/shapes-detector/v-1"]
    assert "--network=host" in argv and "--publish" not in argv


def test_ports_are_published_on_loopback_off_the_host_network():
    argv = podman_run_argv(_serving_pod(), image="img", name="s", source="dep",
                           claims={"mlops-models": "/m"}, network="bridge",
                           publish={8080: 41000})
    assert _pairs(argv, "--publish") == ["127.0.0.1:41000:8080"]
    with pytest.raises(PodRunError, match="port 9999 is not among its containerPorts"):
        podman_run_argv(_serving_pod(), image="img", name="s", source="dep",
                        claims={"mlops-models": "/m"}, network="bridge", publish={9999: 1})


def test_a_claim_without_a_directory_is_named():
    with pytest.raises(PodRunError, match=r"dep: container 'server': volumeMounts\[0\]: "
                                          r"claim 'mlops-models'"):
        podman_run_argv(_serving_pod(), image="img", name="s", source="dep")


def test_the_controller_pod_extra_args_and_a_secret_env():
    docs = controller_manifests(gitops_url="/srv/g.git", prometheus_url="http://p:9090")
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    with pytest.raises(PodRunError, match="env MLOPS_GIT_TOKEN comes from"):
        podman_run_argv(pod, image="img", name="c", source="ctl",
                        claims={"mlops-controller": "/r"})
    argv = podman_run_argv(pod, image="img", name="c", source="ctl",
                           claims={"mlops-controller": "/r"},
                           secrets={"MLOPS_GIT_TOKEN": "t0k"}, extra_args=["--once"],
                           extra_volumes=["/g.git:/srv/g.git:rw"])
    assert "MLOPS_GIT_TOKEN=t0k" in _pairs(argv, "--env")
    assert _pairs(argv, "--volume") == ["/r:/work:rw", "/g.git:/srv/g.git:rw"]
    assert argv[-1] == "--once" and "--network=none" in argv


def test_the_paddlejob_workers_get_the_operators_env_and_the_shm_emptydir(tmp_path):
    """Two workers of the example's smoke job (two replicas): one `podman run` each, on the
    host network, with the container's env plus paddle-operator's and nothing of this
    machine's."""

    loaded = load_config(ROOT / "examples" / "shapes-detector")
    job = loaded.smoke.model_copy(update={"workers": 2})
    text = yaml.safe_dump(paddlejob_manifest(loaded, job, "smoke", PipelineSettings()))
    manifest = yaml.safe_load(text.replace("{{workflow.name}}", "wf"))
    workers = paddlejob_workers(manifest, image="img", workspace=tmp_path, store=Store(tmp_path),
                                name="wf-smoke")
    assert [w.index for w in workers] == [0, 1]
    for worker in workers:
        argv = worker.argv
        assert argv[:2] == ["podman", "run"] and "--network=host" in argv
        env = dict(e.split("=", 1) for e in _pairs(argv, "--env"))
        assert env["POD_IP"] == f"127.0.0.{worker.index + 1}"
        assert env["PADDLE_TRAINER_ID"] == str(worker.index)
        assert env["PADDLE_TRAINERS_NUM"] == "2"
        assert env["PADDLE_TRAINER_ENDPOINTS"].count(",") == 1
        assert env["MLOPS_OUT"] == "/workspace/out" and "PATH" not in env
        # the workspace as the training pod sees it (issue 41, finding 5): the checkout and
        # the prepared data read-only, its own output folder writable, each a subPath,
        # made where missing as the kubelet makes one
        assert _pairs(argv, "--volume") == [f"{tmp_path}/repo:/workspace/repo:ro",
                                            f"{tmp_path}/out/smoke:/workspace/out/smoke:rw",
                                            f"{tmp_path}/out/data:/workspace/out/data:ro"]
        assert (tmp_path / "out" / "smoke").is_dir()
        assert _pairs(argv, "--tmpfs") == [
            f"/dev/shm:rw,exec,nosuid,nodev,mode=1777,size={512 * 2**20}"]
        assert _pairs(argv, "--workdir") == ["/workspace/repo"]
        tail = argv[argv.index("img") + 1:]
        assert tail[:4] == ["-m", "paddle.distributed.launch", "--log_dir",
                            f"/workspace/out/smoke/launch-logs/worker-{worker.index}"]
        assert worker.env["CONTAINERS_STORAGE_CONF"] == str(tmp_path / "storage.conf")


def test_args_alone_keep_the_images_entrypoint_and_vars_expand_as_the_kubelet_does():
    pod = {"containers": [{"name": "c", "args": ["--out", "$(OUT)/x", "$(NOPE)"],
                           "env": [{"name": "BASE", "value": "/w"},
                                   {"name": "OUT", "value": "$(BASE)/o"}],
                           "workingDir": "/w"}]}
    argv = podman_run_argv(pod, image="img", name="c", source="p")
    assert "--entrypoint" not in argv
    assert argv[argv.index("img") + 1:] == ["--out", "/w/o/x", "$(NOPE)"]
    assert _pairs(argv, "--workdir") == ["/w"]
    assert "--read-only" not in argv and "--user" not in argv


@pytest.mark.parametrize("pod, match", [
    ({"securityContext": {"runAsNonRoot": True, "runAsUser": 0}, "containers": [{"name": "c"}]},
     "runAsNonRoot is true but runAsUser is 0"),
    ({"containers": [{"name": "c", "securityContext": {"privileged": True}}]}, "privileged"),
    ({"containers": [{"name": "c", "securityContext": {
        "seccompProfile": {"type": "Localhost"}}}]}, "seccompProfile.type 'Localhost'"),
    ({"containers": [{"name": "c", "volumeMounts": [{"name": "h", "mountPath": "/h"}]}],
      "volumes": [{"name": "h", "hostPath": {"path": "/etc"}}]}, "volume 'h' is a hostPath"),
    ({"containers": [{"name": "c", "volumeMounts": [{"name": "x", "mountPath": "/x"}]}]},
     "volume 'x' is not in the pod's volumes"),
    ({"containers": [{"name": "c", "volumeMounts": [{"name": "e", "mountPath": "/e"}]}],
      "volumes": [{"name": "e", "emptyDir": {"sizeLimit": "lots"}}]}, "sizeLimit 'lots'"),
])
def test_what_cannot_run_as_written_is_an_error_naming_the_field(pod, match):
    with pytest.raises(PodRunError, match=match):
        podman_run_argv(pod, image="img", name="c", source="p")


@pytest.mark.parametrize("quantity, size", [("1Gi", 2**30), ("512Mi", 512 * 2**20),
                                            ("1G", 10**9), ("100", 100)])
def test_tmpfs_size(quantity, size):
    assert tmpfs_size(quantity, "f") == str(size)


def test_a_machine_without_podman_gets_the_apt_command(tmp_path):
    with pytest.raises(PodmanMissing, match="podman, runc, mmdebstrap not found.*apt-get "
                                            "install podman runc mmdebstrap"):
        require_tools("podman", "runc", "mmdebstrap", path=str(tmp_path))
    require_tools("podman", "runc", "mmdebstrap")  # this machine has them (scripts/setup.sh)


def test_the_runroot_stays_short_whatever_the_store_path(tmp_path):
    """podman's container clean-up refuses a --runroot over 50 characters (every run then
    hangs 20 s): the runroot lives under /run, named after the store, not inside it."""

    store = Store(tmp_path / ("a-long-store-directory-name-" * 3))
    try:
        store.prepare()
    finally:
        shutil.rmtree(store.run_dir, ignore_errors=True)  # made under /run by prepare()
    conf = (store.root / "storage.conf").read_text()
    runroot = next(line.split('"')[1] for line in conf.splitlines()
                   if line.startswith("runroot"))
    assert len(runroot) <= 50 and not runroot.startswith(str(store.root))
    assert Store(store.root).run_dir == store.run_dir  # the same store, the same runroot
    assert Store(tmp_path / "other").run_dir != store.run_dir
