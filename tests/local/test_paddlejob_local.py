"""The rendered PaddleJob runs locally the way paddle-operator v0.3.5 runs it in a cluster.

What the operator does to each worker pod is read from its source
(`controllers/paddlejob_helper.go`: `constructPod` adds `POD_IP`,
`PADDLE_TRAINER_ID`, `TRAINING_ROLE`, `PADDLE_TRAINING_ROLE`; `constructConfigMap`
gives `TRAINER_PORTS_NUM`, `PADDLE_PORT`, `PADDLE_TRAINER_ENDPOINTS`,
`PADDLE_TRAINERS`, `PADDLE_TRAINERS_NUM` through `envFrom`;
`controllers/paddlejob_controller.go`: `PADDLE_PORT = 36000`, `HOST_PORT_NUM = 20`).
Everything else is real: Paddle's launcher, gloo, two processes.
"""

import io
import pathlib
import textwrap

import pytest

from cogs.containers import Mounts
from cogs.ports import free_port
from workflows import paddlejob_local
from workflows.config import load_config
from workflows.errors import StepError
from workflows.paddlejob import paddlejob_manifest
from workflows.settings import PipelineSettings

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shapes-detector"

# Two ranks that must meet: init the collective, all-reduce rank+1 (1 + 2 = 3).
TINY = textwrap.dedent(
    """
    import paddle
    import paddle.distributed as dist

    dist.init_parallel_env()
    t = paddle.to_tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()} sum {float(t[0])}", flush=True)
    """
)


def test_operator_env_per_worker():
    ips = ["10.0.0.5", "10.0.0.9"]
    assert paddlejob_local.operator_env(1, ips) == {
        "POD_IP": "10.0.0.9",
        "PADDLE_TRAINER_ID": "1",
        "TRAINING_ROLE": "TRAINER",
        "PADDLE_TRAINING_ROLE": "TRAINER",
        "TRAINER_PORTS_NUM": "20",
        "PADDLE_PORT": "36000",
        "PADDLE_TRAINER_ENDPOINTS": "10.0.0.5:36000,10.0.0.9:36000",
        "PADDLE_TRAINERS": "10.0.0.5,10.0.0.9",
        "PADDLE_TRAINERS_NUM": "2",
    }
    # No rank endpoint of its own: that is the launcher's job.
    assert "PADDLE_CURRENT_ENDPOINT" not in paddlejob_local.operator_env(0, ips)
    # Distinct hosts, or Paddle's launcher would count a single node.
    assert len(set(paddlejob_local.worker_ips(3))) == 3


def test_rendered_worker_runs_the_command_under_the_launcher():
    loaded = load_config(EXAMPLE)
    manifest = paddlejob_manifest(loaded, loaded.full, "full", PipelineSettings())
    container = manifest["spec"]["worker"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python"]
    assert container["args"][:4] == ["-m", "paddle.distributed.launch", "--log_dir",
                                     "$(MLOPS_OUT)/full/launch-logs/worker-$(PADDLE_TRAINER_ID)"]
    assert container["args"][4:7] == ["train.py", "--output-dir", "$(MLOPS_OUT)/full"]

    local = {"MLOPS_REPO": "/r", "MLOPS_OUT": "/o", "MLOPS_OUTPUTS": "/x"}
    specs = paddlejob_local.worker_specs(
        manifest, port=40000, mounts=Mounts({"/workspace/repo": "/r"}), local_env=local,
        base_env={"PATH": "/bin"}, cores=2)
    assert len(specs) == 2
    second = specs[1]
    assert second.cwd == "/r"
    assert second.argv[1:6] == ["-m", "paddle.distributed.launch", "--log_dir",
                                "/o/full/launch-logs/worker-1", "train.py"]
    assert second.env["POD_IP"] == "127.0.0.2" and second.env["PADDLE_TRAINER_ID"] == "1"
    assert second.env["PADDLE_TRAINER_ENDPOINTS"] == "127.0.0.1:40000,127.0.0.2:40000"
    assert second.env["OMP_NUM_THREADS"] == "1"  # 2 cores, 2 workers
    assert second.env["PATH"] == "/bin"


def test_a_non_python_command_cannot_be_a_multi_worker_job(tmp_path):
    loaded = load_config(EXAMPLE)
    loaded.config.training.command[:] = ["./train.sh"]
    with pytest.raises(StepError, match="cannot run as a 2-worker PaddleJob"):
        paddlejob_manifest(loaded, loaded.full, "full", PipelineSettings())


def _job(script_dir: pathlib.Path, command: list[str], args: list[str]) -> dict:
    """A PaddleJob like the pipeline's: 2 workers, the script's dir as workingDir."""
    return {
        "apiVersion": "batch.paddlepaddle.org/v1", "kind": "PaddleJob",
        "metadata": {"name": "tiny"},
        "spec": {"worker": {"replicas": 2, "template": {"spec": {"containers": [{
            "name": "paddle", "image": "unused", "workingDir": str(script_dir),
            "command": command, "args": args,
            "env": [{"name": "GLOG_minloglevel", "value": "2"}],
        }]}}}},
    }


def _run(manifest: dict) -> tuple[str, Exception | None]:
    log = io.BytesIO()
    specs = paddlejob_local.worker_specs(manifest, port=free_port())
    try:
        paddlejob_local.run_paddlejob(specs, log, name="tiny", timeout=240)
    except paddlejob_local.PaddleJobFailed as exc:
        return log.getvalue().decode(errors="replace"), exc
    return log.getvalue().decode(errors="replace"), None


@pytest.mark.slow
def test_the_old_manifest_fails_as_in_the_cluster_and_the_new_one_forms_the_collective(tmp_path):
    """`command: [python, script]` with only the operator's env: `init_parallel_env` asks for
    PADDLE_CURRENT_ENDPOINT, which nobody set (every full training failed on a cluster).
    The launcher form, with the same env, makes two ranks that agree on an all-reduce."""
    (tmp_path / "tiny.py").write_text(TINY)
    text, error = _run(_job(tmp_path, ["python", "tiny.py"], []))
    assert error is not None and "exited with code" in str(error)
    assert "PADDLE_CURRENT_ENDPOINT is needed, but not set" in text

    logs = "$(PADDLE_TRAINER_ID)"
    text, error = _run(_job(tmp_path, ["python"], [
        "-m", "paddle.distributed.launch", "--log_dir", str(tmp_path / "logs" / logs), "tiny.py"]))
    assert error is None, text
    assert "[worker-0] rank 0 of 2 sum 3.0" in text
    assert "[worker-1] rank 1 of 2 sum 3.0" in text or (
        "rank 1 of 2 sum 3.0" in (tmp_path / "logs" / "1" / "workerlog.0").read_text())


def test_one_failing_worker_stops_the_others(tmp_path):
    """Worker 1 exits at once; worker 0 would sleep for a minute: it is stopped, not awaited."""
    (tmp_path / "w.py").write_text(
        "import os, sys, time\n"
        "if os.environ['PADDLE_TRAINER_ID'] == '1':\n"
        "    sys.exit(3)\n"
        "time.sleep(60)\n")
    manifest = _job(tmp_path, ["python", "w.py"], [])
    manifest["spec"]["worker"]["template"]["spec"]["containers"][0]["args"] = []
    text, error = _run(manifest)
    assert error is not None and "worker 1 exited with code 3" in str(error)
    assert "other workers were stopped" in str(error)


def test_the_training_pods_see_the_checkout_and_the_prepared_data_read_only():
    """Issue 41, finding 5: the workers mounted the whole workspace read-write, and a
    training job replaced the verified val annotations. They mount their own output
    folder writable, the checkout and the prepared data read-only (subPaths)."""
    loaded = load_config(EXAMPLE)  # with data pins
    job = paddlejob_manifest(loaded, loaded.full, "full", PipelineSettings())
    (container,) = job["spec"]["worker"]["template"]["spec"]["containers"]
    workspace = [m for m in container["volumeMounts"] if m["name"] == "workspace"]
    assert workspace == [
        {"name": "workspace", "mountPath": "/workspace/repo", "subPath": "repo",
         "readOnly": True},
        {"name": "workspace", "mountPath": "/workspace/out/full", "subPath": "out/full"},
        {"name": "workspace", "mountPath": "/workspace/out/data", "subPath": "out/data",
         "readOnly": True},
    ]
    # Everything the worker's command is told to write is under its writable folder.
    args = " ".join(container["args"])
    for flag in ("--output-dir", "--checkpoint-dir", "--log_dir"):
        value = container["args"][container["args"].index(flag) + 1]
        assert value.startswith("$(MLOPS_OUT)/full"), (flag, value)
    assert "--data-dir $(MLOPS_OUT)/data" in args


def test_the_local_runner_honours_a_read_only_mount(tmp_path):
    """Locally each worker sees its `readOnly` mounts read-only (a bind mount in its own
    mount namespace): writing, replacing or adding a file there fails as on a read-only
    volume, root or not, while its writable folder takes its output; nothing of the
    mounts outlives the job. Real processes, real unshare(1) and mount(8)."""
    assert paddlejob_local.read_only_problem() is None  # this machine can (CI's too)
    out, repo = tmp_path / "out", tmp_path / "repo"
    (out / "data" / "annotations").mkdir(parents=True)
    (out / "data" / "annotations" / "val.json").write_text("{}")
    (out / "full").mkdir()
    repo.mkdir()
    job = {"metadata": {"name": "j"}, "spec": {"worker": {"replicas": 1, "template": {"spec": {
        "containers": [{
            "name": "paddle", "image": "x", "workingDir": "/workspace/repo",
            "command": ["sh", "-c"],
            "args": ['echo forged > "$DATA/annotations/val.json"; '
                     'mv "$DATA/annotations/val.json" "$FULL/x"; '
                     'echo new > "$DATA/annotations/new.json"; '
                     'touch mine; echo ok > "$FULL/y"'],
            "env": [{"name": "DATA", "value": "/workspace/out/data"},
                    {"name": "FULL", "value": "/workspace/out/full"}],
            "volumeMounts": [
                {"name": "workspace", "mountPath": "/workspace/repo", "subPath": "repo",
                 "readOnly": True},
                {"name": "workspace", "mountPath": "/workspace/out/full", "subPath": "out/full"},
                {"name": "workspace", "mountPath": "/workspace/out/data",
                 "subPath": "out/data", "readOnly": True}]}]}}}}}
    mounts = Mounts({"/workspace/repo": str(repo), "/workspace/out": str(out)})
    read_only = paddlejob_local.read_only_dirs(job, mounts)
    assert read_only == [str(repo), str(out / "data")]
    specs = paddlejob_local.worker_specs(job, port=free_port(), mounts=mounts,
                                         read_only=read_only)
    log = io.BytesIO()
    paddlejob_local.run_paddlejob(specs, log, name="j")
    text = log.getvalue().decode()
    assert text.count("Read-only file system") == 4, text
    assert (out / "data" / "annotations" / "val.json").read_text() == "{}"
    assert not (out / "data/annotations/new.json").exists()  # (`mv` copied it: reading is fine)
    assert not (repo / "mine").exists()
    assert (out / "full" / "y").read_text() == "ok\n"
    (out / "data" / "annotations" / "new.json").write_text("{}")  # ours again, after the job
