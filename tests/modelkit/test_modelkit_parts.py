"""The model-repo kit's parts on their own (the examples' tests run them inside real trainings).

Cheap checks of what a training would show only after minutes: a failed write
leaves the old file, checkpoints keep the newest two and refuse another
schedule, the weights cache key follows the kit's code too, a bad metrics port
is one clear line, the training split decodes its images only when first used,
and the kit imports nothing but the base and PaddlePaddle (a training image carries
nothing else of ours: paddle-mlops[kit]).
"""

import argparse
import json
import subprocess
import sys

import numpy as np
import paddle
import pytest
from PIL import Image

from modelkit import checkpoints, datasets, weights_cache
from modelkit.errors import TrainError, run_main
from modelkit.files import atomic_write, atomic_write_text
from modelkit.metrics import Metrics
from tests.rooms import ROOMS
from tests.test_packaging import _BLOCKER  # the same import blocker the image checks use


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = atomic_write_text(tmp_path / "model.yaml", "old\n")

    def half_then_crash(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half_then_crash)
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["model.yaml"]


def _state(step):
    return {"model": {"w": paddle.full([2], float(step))}, "optimizer": {},
            "meta": {"step": step, "global_batch": 16, "images": 64}}


def test_checkpoints_keep_the_newest_two_and_resume_only_the_same_schedule(tmp_path):
    for step in (4, 8, 12):
        checkpoints.save(tmp_path, step, _state(step))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-00000008.pdckpt",
                                                          "ckpt-00000012.pdckpt"]
    latest = checkpoints.latest(tmp_path)
    assert checkpoints.load(latest, global_batch=16, images=64)["meta"]["step"] == 12
    with pytest.raises(TrainError, match="written for --batch-size 16 over 64 images, this run "
                                         "has 32 over 64; use a fresh --checkpoint-dir"):
        checkpoints.load(latest, global_batch=32, images=64)


def test_the_weights_key_follows_the_repo_code_and_the_kit_code(tmp_path, monkeypatch):
    """A change to the loop changes the weights as surely as one to the model."""
    args = argparse.Namespace(epochs=1, batch_size=16, lr=0.1, max_steps=0, subset=0, seed=0,
                              checkpoint_every=50)
    repo, kit = tmp_path / "repo", tmp_path / "kit"
    repo.mkdir()
    kit.mkdir()
    (repo / "model.py").write_text("A = 1\n")
    (kit / "loop.py").write_text("B = 1\n")
    monkeypatch.setattr(weights_cache, "KIT_DIR", kit)
    key = weights_cache.weights_key(args, "sha256:d", 1, repo)
    assert weights_cache.weights_key(args, "sha256:d", 1, repo) == key
    (kit / "loop.py").write_text("B = 2\n")
    assert weights_cache.weights_key(args, "sha256:d", 1, repo) not in (key, "")
    changed_kit = weights_cache.weights_key(args, "sha256:d", 1, repo)
    (repo / "model.py").write_text("A = 2\n")
    assert weights_cache.weights_key(args, "sha256:d", 1, repo) != changed_kit
    assert weights_cache.weights_key(args, "sha256:d", 2, repo) != \
        weights_cache.weights_key(args, "sha256:d", 1, repo)
    # a warm start's weights are an input too (Recipe.weights_inputs)
    assert weights_cache.weights_key(args, "sha256:d", 1, repo, {"init": "sha256:a"}) not in (
        weights_cache.weights_key(args, "sha256:d", 1, repo),
        weights_cache.weights_key(args, "sha256:d", 1, repo, {"init": "sha256:b"}))


def test_a_bad_metrics_port_variable_is_one_line_exit_2(monkeypatch, capsys):
    monkeypatch.setenv("MLOPS_METRICS_PORT", "ninety")
    assert run_main(lambda: Metrics.from_env(rank=0)) == 2
    assert capsys.readouterr().err == "error: MLOPS_METRICS_PORT='ninety' is not a port number\n"


def test_a_repo_error_keeps_its_own_exit_code_and_others_are_not_swallowed(capsys):
    class DatasetError(Exception):
        exit_code = 3

    def fail(exc):
        def body():
            raise exc
        return body

    assert run_main(fail(DatasetError("data/train.json: not found")), DatasetError) == 3
    assert capsys.readouterr().err == "error: data/train.json: not found\n"
    with pytest.raises(KeyError):  # a bug keeps its traceback
        run_main(fail(KeyError("x")), DatasetError)


def test_the_kit_needs_only_the_base_and_paddlepaddle():
    """What paddle-mlops[kit] installs is enough: the pipeline's, the server's and the
    controller's packages are made unimportable, as they are in a training image."""
    blocked = ["hera", "starlette", "uvicorn", "cv2",  # (PIL: a PaddlePaddle dependency)
               "faster_coco_eval", "jsonschema",
               "kubernetes_validate", "kubernetes", "matplotlib", "pycocotools", "tritonclient",
               # every other room but the two below it (.importlinter's modelkit-alone)
               *(r for r in ROOMS if r not in ("modelkit", "contracts", "cogs"))]
    code = (_BLOCKER.format(blocked=blocked)
            + "import modelkit, modelkit.loop, modelkit.export, modelkit.metrics\n"
            + "import paddle\nprint(sorted(n for n in sys.modules if n.split('.')[0] in BLOCKED))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_training_split_is_decoded_when_first_used(tmp_path):
    """`training_split` lists the split without opening an image (here none exists yet: a
    run of no step never asks), then gives what `load_split`'s stacked array gives."""
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (6, 8, 10, 3), dtype=np.uint8)
    entries = [{"id": i, "file_name": f"train/{i}.png"} for i in range(6)]
    for split in ("train", "val"):
        (tmp_path / f"{split}.json").write_text(json.dumps(
            {"images": entries, "annotations": [], "categories": []}))
    _, images, _, listed = datasets.training_split(tmp_path, 0, "gen.py")
    _, first_two, _, _ = datasets.training_split(tmp_path, 2, "gen.py")
    assert listed == entries and len(images) == 6 and len(first_two) == 2

    (tmp_path / "train").mkdir()
    for i, image in enumerate(pixels):
        Image.fromarray(image).save(tmp_path / "train" / f"{i}.png")
    stacked, _, _ = datasets.load_split(tmp_path, "train")
    assert np.array_equal(stacked, pixels)
    idx = np.array([2, 0, 2])
    assert np.array_equal(images[idx], stacked[idx]) and images.shape == (6, 8, 10, 3)
    assert np.array_equal(images[1], stacked[1]) and np.array_equal(images[-6], stacked[0])
    assert np.array_equal(np.asarray(first_two), stacked[:2])
