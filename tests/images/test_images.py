"""The images we ship, built with podman and started as the cluster would start them.

Each check runs what the cluster runs, from the RENDERED manifests, in the
image built from the Dockerfile a cluster user builds (tests/fixtures/images.py),
with the manifest's securityContext applied by `mlops.images.podrun`
(user, read-only root, dropped capabilities, no privilege escalation, the
emptyDirs as tmpfs, the claims as bind mounts):

* the example's training image: the smoke PaddleJob (`workflows.paddlejob`),
  its two workers as two containers on the host network with
  paddle-operator's env (`workflows.paddlejob_local.worker_specs`, after
  PaddleFlow/paddle-operator v0.3.5 `controllers/paddlejob_helper.go`),
  through `python -m paddle.distributed.launch`, to a finished training and
  an export;
* the serve image: the Deployment `mlops promote propose` wrote into a GitOps
  repo answers its readiness probe and one inference on the smoke PaddleJob's
  export (a real model, briefly trained in the training image) mounted where
  the models claim would be;
* the controller image: `mlops controller run --once` on that GitOps repo;
  the same image as the web UI: its page and its models;
* the tool image: `mlops data snapshot` and `prepare` of an `s3://` dataset
  (moto's S3 server on the host loopback), as prepare-data runs them.

What no program here can stand in for, and how it is bridged (said where it
is done): a Kubernetes API (the controller's `--readiness kubernetes` is
overridden by `--readiness none`), a forge or git server (the GitOps repo is
a bind-mounted bare repo owned by the pod's user, as git's safe.directory
check requires) and Prometheus (not queried: no canary is in progress).

Without libgomp1 in the Dockerfiles, `import paddle` fails in the training
and serve images and so does every check that starts them (issue 25, defect 2).
"""

import base64
import concurrent.futures
import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import yaml

from datapins.snapshot import snapshot
from datapins.sources import open_source
from local.platform.podspec import probe_of
from mlops.errors import UserError
from mlops.images import runner
from mlops.images.build import IMAGES, build_all
from mlops.images.podrun import podman_run_argv
from mlops.images.stepbuild import build_for_step
from mlops.ui.manifests import ui_manifests
from promotion.cluster.deploy import controller_manifests
from tests.fixtures.common import free_port
from tests.fixtures.training import copy_example
from workflows.config import load_config
from workflows.paddlejob import paddlejob_manifest
from workflows.pipeline import BUILD_SCRIPT, build_workflow_template
from workflows.settings import PipelineSettings

# A cold build (a changed kit or lock) takes minutes in the first test's setup: more than
# pyproject.toml's 900 s per test on a busy machine
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

MODEL = "shapes-detector"
GITOPS_IN_POD = "/srv/gitops.git"  # where a pod finds the repo its URL names (a mount here)


def _podman(built, *args):
    return built.store.podman(*args, check=False, timeout=300)


WITH_PADDLE = ("shapes-detector", "products-yolov3", "train", "serve", "training-base")


@pytest.fixture(scope="module")
def paddle_imports(built_images):
    """`import paddle` in each image that installs it, the containers started side by side:
    each is ~2 s, mostly one core waiting on the import's file reads."""
    def run(key):
        return _podman(built_images, "run", "--rm", "--pull=never", "--network=none",
                       "--entrypoint", "python", built_images.names[key], "-c",
                       "import paddle; print(paddle.__version__)")

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(WITH_PADDLE)) as pool:
        return dict(zip(WITH_PADDLE, pool.map(run, WITH_PADDLE)))


@pytest.mark.parametrize("key", WITH_PADDLE)
def test_paddle_imports_in_every_image_that_installs_it(paddle_imports, key):
    """`import paddle` needs libgomp.so.1, which python:3.11-slim lacks (defect 2)."""
    proc = paddle_imports[key]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("3.3.1")


def test_the_controller_image_carries_no_paddle_and_no_build_secret(built_images):
    """The controller+UI image is built without PaddlePaddle (its extras); the pip.conf and
    CA bundle mounted into the builds left no content in any layer."""
    image = built_images.names["controller"]
    proc = _podman(built_images, "run", "--rm", "--pull=never", "--network=none",
                   "--entrypoint", "sh", image, "-c",
                   "python -c 'import paddle' 2>&1; wc -c < /etc/pip.conf")
    assert "No module named 'paddle'" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "0"  # the mount point, empty


def test_the_tool_image_pins_and_prepares_an_s3_dataset(built_images, s3_dataset, coco_dataset):
    """prepare-data and the snapshot CronWorkflow run in the tool image: it must carry boto3
    (the train extra) to read `s3://` sources. moto's S3 server on the host loopback stands
    in for the store (tests/datapins/test_datapins_s3.py says why); the container shares
    the host's network and gets the endpoint and keys as env, as the rendered step does."""
    lock = "/tmp/data.lock.json"
    script = (f"mlops data snapshot s3://datasets/shapes/w48 --name w48 --out {lock} "
              f"&& mlops data prepare {lock} --dest /tmp/ws --cache /tmp/cache "
              f"&& echo '--- lock' && cat {lock}")
    env = [f"--env={name}={os.environ[name]}" for name in
           ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")]
    proc = _podman(built_images, "run", "--rm", "--pull=never", "--network=host", *env,
                   f"--env=MLOPS_DATA_ENDPOINT_URL={s3_dataset}", "--entrypoint", "sh",
                   built_images.names["train"], "-c", script)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "13 fetched" in proc.stdout
    pinned = json.loads(proc.stdout.split("--- lock\n", 1)[1])
    from_dir = snapshot(open_source(str(coco_dataset)), "w48")
    assert pinned["source"] == "s3://datasets/shapes/w48" and pinned["digest"] == from_dir.digest


def test_the_example_builds_from_its_own_context_as_the_pipelines_step_builds_it(
        built_images, tmp_path):
    """Issue 42, A1 (the every-run breaker): the cluster's build-image gives BuildKit the
    repo's checkout and the build arguments of its script, nothing else. The local step
    (`mlops run`, the demo) builds from exactly those, read from the rendered step; the
    example's Dockerfile must build so and its image import paddle and the kit. Before the
    fix the build stopped at `No matching distribution found for paddle-mlops[kit]==0.1.0`.
    A second push whose build inputs did not change (only mlops.yaml) is not built again."""
    repo = copy_example(tmp_path / "repo")
    doc = build_workflow_template(load_config(repo), PipelineSettings()).to_dict()
    step = next(t for t in doc["spec"]["templates"] if t["name"] == "build-image")
    env = {e["name"]: e["value"].replace("{{workflow.parameters.revision}}", "0" * 40)
           for e in step["container"]["env"] if "value" in e}
    env["MLOPS_REPO"] = str(repo)  # where the checkout is, as the runner maps it
    lines = []
    first = build_for_step(env, step["container"]["args"][0], store=built_images.store,
                           log=lines.append)
    assert first.image.startswith("localhost/mlops/shapes-detector-train:"), lines
    assert not any("--volume" in line or "find-links" in line for line in lines), lines
    proc = _podman(built_images, "run", "--rm", "--pull=never", "--network=none",
                   "--entrypoint", "python", first.image, "-c",
                   "import os, paddle, modelkit; print(paddle.__version__, os.getuid())")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2:] == ["3.3.1", "1000"]
    (repo / "mlops.yaml").write_text((repo / "mlops.yaml").read_text() + "# another push\n")
    again = build_for_step(env, step["container"]["args"][0], store=built_images.store,
                           log=lines.append)
    assert (again.image, again.built) == (first.image, False)


def test_a_requirement_only_our_wheel_could_meet_fails_the_local_build(built_images, tmp_path):
    """The local build gets what the cluster's BuildKit gets and nothing else: the model-repo
    kit by name, which `mlops images build` once offered from a mounted wheelhouse, must fail
    here as it fails in a cluster (issue 42, A1: the defect would have shown here first)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    # the examples' Dockerfile before the fix: not FROM the training base (which has the kit)
    (repo / "Dockerfile").write_text("FROM python:3.11-slim\nCOPY requirements.txt .\n"
                                     "RUN pip install --no-cache-dir -r requirements.txt\n")
    (repo / "requirements.txt").write_text("paddle-mlops[kit]==0.1.0\n")
    env = {"MLOPS_REPO": str(repo), "IMAGE": "registry.example.com/mlops/x-train:0",
           "BASE_IMAGE": "registry.example.com/mlops/training-base:0.1.0-cpu"}
    with pytest.raises(UserError, match="as it would in the cluster") as failed:
        build_for_step(env, BUILD_SCRIPT, store=built_images.store, log=lambda line: None)
    assert "No matching distribution found for paddle-mlops" in str(failed.value)


def test_an_unchanged_rebuild_reuses_every_layer(built_images):
    """A second build of an image with nothing changed gives the same image ID."""

    name = built_images.names["serve"]
    before = _podman(built_images, "image", "inspect", "--format", "{{.Id}}", name).stdout
    build_all(pathlib.Path(__file__).resolve().parents[2],
              [s for s in IMAGES if s.key == "serve"], store=built_images.store,
              log=lambda line: None)
    after = _podman(built_images, "image", "inspect", "--format", "{{.Id}}", name).stdout
    assert before.strip() and before == after


def _smoke_paddlejob(repo: pathlib.Path, image: str) -> dict:
    """The example's smoke PaddleJob with two workers, as Argo would create it."""
    loaded = load_config(repo)
    job = loaded.smoke.model_copy(update={"workers": 2})
    text = yaml.safe_dump(paddlejob_manifest(loaded, job, "smoke", PipelineSettings()))
    for expr, value in {"{{workflow.name}}": "images-e2e",
                        "{{workflow.parameters.revision}}": "0" * 40,
                        "{{inputs.parameters.image}}": image}.items():
        text = text.replace(expr, value)  # what Argo substitutes
    return yaml.safe_load(text)


@dataclasses.dataclass(frozen=True)
class SmokeRun:
    """Where the smoke PaddleJob's containers left their files, and as whom they ran."""

    out: pathlib.Path   # the job's out/smoke/ on the workspace claim
    log: str            # both workers' output
    user: int           # the pod's runAsUser


@pytest.fixture(scope="module")
def smoke_job(built_images, shapes_dataset, tmp_path_factory):
    """The example's smoke PaddleJob, run once: its two workers as two containers of the
    training image to a finished training and an export. The test below checks the run;
    the serving checks serve its export (what the training image exported, the serve
    image serves), so the tier trains nothing else."""
    tmp = tmp_path_factory.mktemp("images-smoke")
    workspace = tmp / "workspace"  # the job's workspace claim
    repo = copy_example(workspace / "repo")
    # where prepare-data leaves the pinned dataset: the PaddleJob's --data-dir
    shutil.copytree(shapes_dataset, workspace / "out" / "data")
    manifest = _smoke_paddlejob(repo, built_images.names["shapes-detector"])
    pod = manifest["spec"]["worker"]["template"]["spec"]
    runner.give_to_fs_group(workspace, pod["securityContext"]["fsGroup"])
    workers = runner.paddlejob_workers(manifest, image=pod["containers"][0]["image"],
                                       workspace=workspace, store=built_images.store,
                                       name="images-e2e-smoke")
    assert len(workers) == 2
    log = tmp / "train.log"
    with open(log, "wb") as fh:
        try:
            runner.run_paddlejob_in_containers(workers, fh, store=built_images.store,
                                               name="images-e2e-smoke", timeout=600)
        except Exception as exc:
            pytest.fail(f"{exc}\n{log.read_text(errors='replace')[-4000:]}")
    return SmokeRun(out=workspace / "out" / "smoke", log=log.read_text(errors="replace"),
                    user=pod["securityContext"]["runAsUser"])


def test_the_smoke_paddlejob_trains_and_exports_in_two_worker_containers(smoke_job):
    assert "world=2" in smoke_job.log, smoke_job.log[-3000:]  # one collective of two pods
    model = smoke_job.out / "model"
    assert (model / "model.yaml").is_file() and (model / "inference.pdiparams").is_file()
    assert (smoke_job.out / "bbox.json").is_file()
    # both ranks ran as the manifest's user, not root
    assert {p.stat().st_uid for p in smoke_job.out.iterdir()} == {smoke_job.user}


@pytest.fixture(scope="module")
def gitops_with_model(smoke_job, tmp_path_factory):
    """A GitOps repo where the smoke job's export serves (`propose --approval auto`), its
    Deployment naming the built serve image, on a free port (the pods share the host's
    network here)."""
    work = tmp_path_factory.mktemp("images-gitops")
    repo, port = work / "gitops.git", free_port()
    cli = [sys.executable, "-m", "mlops"]
    subprocess.run([*cli, "gitops", "init", str(repo)], check=True, capture_output=True)
    proc = subprocess.run([*cli, "promote", "propose", str(smoke_job.out / "model"),
                           "--gitops", str(repo), "--approval", "auto",
                           "--image", "localhost/mlops/serve:local", "--port", str(port)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return repo


def _repo_for(repo: pathlib.Path, pod: dict, dest: pathlib.Path) -> pathlib.Path:
    """A copy of the bare repo owned by the pod's user: in a cluster a forge serves it;
    mounted, git refuses a repo its user does not own (safe.directory)."""
    shutil.copytree(repo, dest)
    user = pod["securityContext"]["runAsUser"]
    for root, dirs, files in os.walk(dest):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), user, user)
    os.lchown(dest, user, user)
    return dest


def _most_confident_val_image(smoke_out: pathlib.Path, dataset: pathlib.Path) -> pathlib.Path:
    """The val image holding the smoke export's most confident detection in its own
    bbox.json (train.py runs the export with paddle.inference over val): a 2-step model
    finds few objects, so an arbitrary image may have none to answer with."""
    detections = json.loads((smoke_out / "bbox.json").read_text())
    best = max(detections, key=lambda d: d["score"])
    images = json.loads((dataset / "val.json").read_text())["images"]
    return dataset / next(i["file_name"] for i in images if i["id"] == best["image_id"])


def test_the_serving_deployment_is_ready_and_answers_an_inference(
        built_images, gitops_with_model, smoke_job, shapes_dataset, tmp_path):
    model_dir = smoke_job.out / "model"
    record = yaml.safe_load((model_dir / "model.yaml").read_text())
    version = record["version"]
    text = subprocess.run(["git", "--git-dir", str(gitops_with_model), "show",
                           f"main:apps/{MODEL}/deployment-{version}.yaml"],
                          check=True, capture_output=True, text=True).stdout
    deployment = yaml.safe_load(text)
    pod = deployment["spec"]["template"]["spec"]
    claim = next(v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
                 if "persistentVolumeClaim" in v)
    models = tmp_path / "models"  # the claim's content: <model>/<version>/
    shutil.copytree(model_dir, models / MODEL / version)
    argv = podman_run_argv(pod, image=pod["containers"][0]["image"], name="images-e2e-serve",
                           source="deployment", claims={claim: str(models)}, network="host")
    probe = probe_of(deployment, "deployment")
    port = pod["containers"][0]["ports"][0]["containerPort"]
    server = runner.start(built_images.store, argv, tmp_path / "serve.log")
    try:
        assert server.wait_http(f"http://127.0.0.1:{probe.port}{probe.path}",
                                timeout=120) == 200
        image = _most_confident_val_image(smoke_job.out, shapes_dataset).read_bytes()
        body = json.dumps({"inputs": [{"name": "image_bytes", "datatype": "BYTES", "shape": [1],
                                       "data": [base64.b64encode(image).decode()]}]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{MODEL}/infer",
                                         data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as resp:
            answer = json.loads(resp.read())
    finally:
        code = server.stop()
    assert answer["model_version"] == version
    bbox = next(o for o in answer["outputs"] if o["name"] == "bbox")
    assert bbox["shape"][1] == 6 and bbox["shape"][0] >= 1
    assert code == 0, server.output()[-3000:]  # drained and exited on SIGTERM
    # read-only root: the server wrote nothing but its tmpfs, and not as root
    assert "Read-only file system" not in server.output()


def test_the_controller_runs_once_on_the_gitops_repo(built_images, gitops_with_model, tmp_path):
    docs = controller_manifests(gitops_url=GITOPS_IN_POD,
                                prometheus_url="http://prometheus.monitoring:9090",
                                image=built_images.names["controller"], git_secret=None)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    claim = next(v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
                 if "persistentVolumeClaim" in v)
    reports = tmp_path / "reports"
    reports.mkdir()
    runner.give_to_fs_group(reports, pod["securityContext"]["fsGroup"])
    repo = _repo_for(gitops_with_model, pod, tmp_path / "gitops.git")
    argv = podman_run_argv(pod, image=pod["containers"][0]["image"], name="images-e2e-ctl",
                           source="controller", claims={claim: str(reports)},
                           extra_volumes=[f"{repo}:{GITOPS_IN_POD}:rw"],
                           # no Kubernetes API here: the one flag not from the manifest
                           extra_args=["--once", "--readiness", "none"])
    proc = built_images.store.podman(*argv, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "error" not in (proc.stdout + proc.stderr).lower(), proc.stdout + proc.stderr
    assert (reports / "mirror.git").is_dir()  # it fetched the repo into its work dir


def test_the_ui_serves_its_page_and_the_models_from_the_gitops_repo(
        built_images, gitops_with_model, tmp_path):
    port = free_port()
    deployment = ui_manifests(gitops_url=GITOPS_IN_POD, image=built_images.names["controller"],
                              port=port)[0]
    pod = deployment["spec"]["template"]["spec"]
    repo = _repo_for(gitops_with_model, pod, tmp_path / "gitops.git")
    argv = podman_run_argv(pod, image=pod["containers"][0]["image"], name="images-e2e-ui",
                           source="ui", network="host",
                           extra_volumes=[f"{repo}:{GITOPS_IN_POD}:ro"],
                           # the rendered pod reads the GitOps repo's token from a Secret
                           # (a private repo); the bare repo here needs none, any value does
                           secrets={"MLOPS_GIT_TOKEN": "unused-by-a-bare-repo"})
    probe = probe_of(deployment, "ui")
    ui = runner.start(built_images.store, argv, tmp_path / "ui.log")
    try:
        assert ui.wait_http(f"http://127.0.0.1:{probe.port}{probe.path}", timeout=60) == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as resp:
            page = resp.read().decode()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/models",
                                        timeout=30) as resp:
                models = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            pytest.fail(f"/api/models: {exc.code} {exc.read()[:2000]!r}")
    finally:
        ui.stop()
    assert "<title>mlops ui</title>" in page
    assert [m["name"] for m in models["models"]] == [MODEL], models
