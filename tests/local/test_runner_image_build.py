"""The local build-image step gets what the cluster's step gives BuildKit, and nothing else.

The podman build itself runs in the image tier (tests/images/test_images.py, the example's
Dockerfile from its own context); here, without podman: which inputs the runner hands the
builder (read from the rendered step: its script and env, the checkout's path mapped to this
machine), how `mlops run` chooses between podman and the stand-in, and the content digest an
unchanged build is skipped on (`.dockerignore` applied as BuildKit and podman apply it).
"""

import pathlib
import shutil

import pytest

from local.argo.runner import run_workflow
from mlops.cli import main as cli
from mlops.errors import UserError
from mlops.images.context import context_digest, context_files
from mlops.images.podman import PodmanMissing
from mlops.images.stepbuild import build_args_of, step_builder
from workflows.config import load_config
from workflows.pipeline import BUILD_SCRIPT, build_workflow_template
from workflows.settings import load_settings

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shapes-detector"


def test_the_build_arguments_are_the_ones_the_cluster_script_passes():
    env = {"BASE_IMAGE": "registry.example.com/base:1", "MLOPS_REPO": "/w/repo", "IMAGE": "x"}
    args, context = build_args_of(BUILD_SCRIPT, env)
    assert args == {"BASE_IMAGE": "registry.example.com/base:1"} and context == "MLOPS_REPO"
    with pytest.raises(UserError, match="BASE_IMAGE"):
        build_args_of(BUILD_SCRIPT, {"MLOPS_REPO": "/w/repo"})
    with pytest.raises(UserError, match="cannot act it out"):
        build_args_of("buildctl build --local context=/x", env)


def test_the_runner_hands_the_builder_the_steps_own_script_and_env(fake_model_repo, tmp_path):
    """What the local build reads comes from the rendered step: a build argument added to
    the cluster's script reaches the local build without a second list to keep."""
    seen = []

    def builder(env, script, log):
        seen.append((env, script))
        log("built by the test's builder")
        return "localhost/mlops/fake-detector-train:0123"

    loaded = load_config(fake_model_repo)
    wt = build_workflow_template(loaded, load_settings())
    result = run_workflow(wt, fake_model_repo, tmp_path / "run", echo=lambda _: None,
                          image_builder=builder)
    assert result.task("build-image").outputs["image"] == "localhost/mlops/fake-detector-train:0123"
    (env, script), = seen
    assert env["MLOPS_REPO"] == str(fake_model_repo)  # the checkout, mapped to this machine
    assert env["BASE_IMAGE"] == loaded.full.image
    sha = result.task("checkout").outputs["revision"]
    assert env["IMAGE"].endswith(f"-train:{sha}")
    assert script == BUILD_SCRIPT
    log = (tmp_path / "run" / "logs" / "build-image.log").read_text()
    assert "built by the test's builder" in log
    assert not (tmp_path / "run" / "environment.txt").exists()


def test_a_failed_build_fails_the_step_with_its_message(fake_model_repo, tmp_path):
    def builder(env, script, log):
        raise UserError("build-image: building Dockerfile failed (podman exit 1), as it would "
                        "in the cluster:\nERROR: No matching distribution found")

    result = run_workflow(build_workflow_template(load_config(fake_model_repo), load_settings()),
                          fake_model_repo, tmp_path / "run", echo=lambda _: None,
                          image_builder=builder)
    assert result.status == "Failed" and result.task("build-image").phase == "Failed"
    assert "as it would in the cluster" in result.task("build-image").message
    log = (tmp_path / "run" / "logs" / "build-image.log").read_text()
    assert "No matching distribution" in log


def test_mlops_run_builds_with_podman_only_when_it_is_there(monkeypatch):
    assert step_builder("record") is None
    with pytest.raises(UserError, match="MLOPS_IMAGE_BUILD"):
        step_builder("docker")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)
    assert step_builder("auto") is None  # the stand-in, and the step's log says why
    with pytest.raises(PodmanMissing, match="apt-get install"):
        step_builder("podman")


def test_mlops_run_takes_the_build_choice(fake_model_repo, tmp_path, capsys):
    assert cli(["run", str(fake_model_repo), "--out", str(tmp_path / "o"),
                "--image-build", "record"]) == 0
    log = (tmp_path / "o" / "logs" / "build-image.log").read_text()
    assert "MLOPS_IMAGE_BUILD=record" in log and "recorded the environment" in log


def test_the_digest_sees_what_the_build_sees_and_nothing_else(tmp_path):
    """The example's .dockerignore keeps only the Dockerfile, requirements and sources: a push
    that changes mlops.yaml or a lock reuses the image; a source change does not."""
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("data", "__pycache__"))
    files = context_files(repo)
    assert "mlops.yaml" not in files and "train.py" in files and "requirements.txt" in files
    args = {"BASE_IMAGE": "b:1"}

    def digest(**kw):
        return context_digest(repo, repo / "Dockerfile", kw.pop("args", args),
                              base_id=kw.pop("base_id", "sha256:aa"))

    first = digest()
    (repo / "mlops.yaml").write_text((repo / "mlops.yaml").read_text() + "\n# a new pin\n")
    (repo / "data").mkdir()
    (repo / "data" / "shapes.lock").write_text("{}")
    assert digest() == first
    assert digest(base_id="sha256:bb") != first  # a rebuilt base
    assert digest(args={"BASE_IMAGE": "b:2"}) != first
    (repo / "train.py").write_text((repo / "train.py").read_text() + "\n")
    assert digest() != first
    # without a .dockerignore the whole context counts, as it does for BuildKit
    (repo / ".dockerignore").unlink()
    assert "mlops.yaml" in context_files(repo)


def test_the_training_base_counts_by_its_kit_for_the_models_built_from_it(tmp_path):
    """The local build-image keys the model image on the training base's kit (the kit, what
    it imports, the dependencies, the Dockerfile), not on its image ID: a change to the
    pipeline's or the server's code, which the base carries but no training image uses,
    rebuilds neither the base nor the model images in a run; a kit change does."""
    from mlops.images.build import IMAGES, kit_key

    spec = next(s for s in IMAGES if s.key == "training-base")
    for name in ("Dockerfile", "pyproject.toml", "requirements.lock", "modelkit", "contracts",
                 "cogs", "serving"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, tmp_path / name)
    first = kit_key(tmp_path, spec)
    (tmp_path / "serving" / "server.py").write_text("# another server\n")
    assert kit_key(tmp_path, spec) == first
    (tmp_path / "modelkit" / "__init__.py").write_text(
        (tmp_path / "modelkit" / "__init__.py").read_text() + "\n# a kit change\n")
    assert kit_key(tmp_path, spec) != first
    assert kit_key(tmp_path, next(s for s in IMAGES if s.key == "train")) == ""
