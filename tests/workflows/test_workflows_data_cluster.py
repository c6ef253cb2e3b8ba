"""Dataset pins in a cluster (issue 29): the data PVC read-only, S3 credentials from a
Secret by reference, and the snapshot CronWorkflow that pushes a pin only on a change.

Kubernetes and Argo cannot run here: the rendered documents are validated against the
official schemas (workflows.lint, as `mlops workflows render` does), and the
CronWorkflow's script is run for real with sh, git and `mlops` against a bare repo on
disk, with the env its container would get.
"""

import os
import pathlib
import subprocess

import pytest
import yaml

from tests.fixtures.training import example_module
from tests.fixtures.workflows import GIT_ENV, git
from workflows.config import load_config
from workflows.data_snapshot import SNAPSHOT_SCRIPT
from workflows.pipeline import build_workflow_template
from workflows.render import SNAPSHOT_FILE, render_documents, render_texts
from workflows.settings import load_settings

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shapes-detector"
SETTINGS = {"data_claim": "team-datasets", "data_mount": "/datasets",
            "data_cache_claim": "mlops-data-cache", "data_secret": "minio-datasets",
            "data_endpoint_url": "http://minio.storage:9000"}


def _repo_with_snapshot(tmp_path: pathlib.Path, source: str) -> pathlib.Path:
    repo = tmp_path / "shapes-detector"
    repo.mkdir()
    config = yaml.safe_load((EXAMPLE / "mlops.yaml").read_text())
    config["data"]["snapshot"] = {"source": source, "schedule": "0 6 * * 1", "name": "shapes"}
    (repo / "mlops.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return repo


def test_rendered_cluster_documents_validate_and_keep_secrets_out_of_argv(tmp_path):
    repo = _repo_with_snapshot(tmp_path, "/datasets/shapes/current")
    loaded, settings = load_config(repo), load_settings(**SETTINGS)
    texts = render_texts(loaded, settings)  # raises if any document fails its schema
    cron = yaml.safe_load(texts[SNAPSHOT_FILE])
    assert cron["kind"] == "CronWorkflow" and cron["spec"]["schedules"] == ["0 6 * * 1"]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    spec = cron["spec"]["workflowSpec"]
    assert spec["automountServiceAccountToken"] is False
    container = spec["templates"][0]["container"]
    env = {e["name"]: e for e in container["env"]}
    assert env["SOURCE"]["value"] == "/datasets/shapes/current"
    assert env["LOCK"]["value"] == "data/shapes.lock"
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "minio-datasets"
    assert env["MLOPS_DATA_ENDPOINT_URL"]["value"] == "http://minio.storage:9000"
    assert {"name": "data", "mountPath": "/datasets", "readOnly": True} in container["volumeMounts"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "team-datasets",
                                                      "readOnly": True}} in spec["volumes"]

    wt = build_workflow_template(loaded, settings).to_dict()
    prepare = next(t for t in wt["spec"]["templates"] if t["name"] == "prepare-data")
    mounts = {m["name"]: m for m in prepare["container"]["volumeMounts"]}
    assert mounts["data"] == {"name": "data", "mountPath": "/datasets", "readOnly": True}
    assert mounts["data-cache"]["mountPath"] == "/data-cache"
    env = {e["name"]: e for e in prepare["container"]["env"]}
    assert env["MLOPS_DATA_CACHE"]["value"] == "/data-cache"
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {
        "name": "minio-datasets", "key": "access-key-id", "optional": True}
    argv = " ".join(prepare["container"]["args"])
    assert "minio" not in argv and "AWS" not in argv
    volumes = {v["name"]: v for v in wt["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["readOnly"] is True
    # evaluate keeps the exports' served detections in the same cache (workflows.served_cache)
    evaluate = next(t for t in wt["spec"]["templates"] if t["name"] == "evaluate")
    container = evaluate["container"]
    assert {"name": "data-cache", "mountPath": "/data-cache"} in container["volumeMounts"]
    assert {"name": "MLOPS_DATA_CACHE", "value": "/data-cache"} in container["env"]
    # Its pod holds only the executor's token, allowed what argoexec does (identity check).
    from workflows.identity import identity_problems

    docs = [d for file_docs in render_documents(loaded, settings).values() for d in file_docs]
    assert identity_problems(docs) == []
    # Only a model repo that asks for a scheduled snapshot gets one.
    assert SNAPSHOT_FILE not in render_texts(load_config(EXAMPLE), load_settings())


@pytest.fixture
def store(tmp_path):
    shapes_data = example_module("shapes_data")
    shapes_data.write_week(tmp_path / "store", 2,
                           dict(shapes_data.DEFAULT_PARAMS, num_train=32, num_val=3))
    return tmp_path / "store"


def test_the_snapshot_script_pushes_a_pin_only_when_the_data_changed(tmp_path, store):
    """The rendered container's script, run by sh with its env: a first pin, no commit for
    the same data under a new name, a commit when week 2 arrives."""
    repo = _repo_with_snapshot(tmp_path, str(store / "week-1"))
    (repo / "data").mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "model repo")
    bare = tmp_path / "model.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
    cron = yaml.safe_load(render_texts(load_config(repo), load_settings())[SNAPSHOT_FILE])
    container = cron["spec"]["workflowSpec"]["templates"][0]["container"]
    assert container["args"] == [SNAPSHOT_SCRIPT]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}

    def run(source: pathlib.Path) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            ["sh", "-c", SNAPSHOT_SCRIPT], capture_output=True, text=True, timeout=120,
            env={**os.environ, **GIT_ENV, **env, "REPO_URL": str(bare), "SOURCE": str(source),
                 "HOME": str(tmp_path), "TMPDIR": str(tmp_path),
                 # the forge is a directory here: git's `file` transport, as the runner maps it
                 "GIT_ALLOW_PROTOCOL": env["GIT_ALLOW_PROTOCOL"] + ":file"})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def log() -> list[str]:
        return git(bare, "log", "--format=%s", "main").splitlines()

    run(store / "week-1")
    assert log()[0] == f"data(shapes-detector): new pin of {store / 'week-1'}"
    pinned = git(bare, "show", "main:data/shapes.lock")
    assert '"name": "shapes-' in pinned and '"images/train/000007.png"' in pinned
    assert "data unchanged: no new pin" in run(store / "week-1").stdout
    assert len(log()) == 2
    run(store / "week-2")
    assert len(log()) == 3 and "w2-000002.png" in git(bare, "show", "main:data/shapes.lock")
