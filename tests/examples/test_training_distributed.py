"""Two ranks through ``paddle.distributed.launch`` (gloo, CPU): gradients really synchronise.

Each rank writes the sha256 of its final weights (parameters and the averaged
BatchNorm statistics) to ``OUT/rank-<r>.sha256``; equal hashes that differ
from the initial weights mean both ranks trained, and trained the same model.
Also: the Prometheus ``/metrics`` endpoint each rank serves while it trains.
"""

import re
import subprocess
import sys
import urllib.request

import paddle

from tests.fixtures.common import free_port
from tests.fixtures.training import copy_example, example_module, training_env

# 32 images, global batch 8 (4 a rank) -> 4 steps per epoch, 8 steps in 2 epochs
FLAGS = ["--subset", "32", "--batch-size", "8", "--epochs", "2", "--log-every", "2",
         "--checkpoint-every", "4", "--seed", "3"]


def _initial_digest(seed):
    model_lib = example_module("model")
    train = example_module("train")
    paddle.seed(seed)
    net = model_lib.ShapesNet(num_classes=3)
    return train.weights_digest(net.state_dict())


def test_two_ranks_end_with_identical_trained_weights(tmp_path, small_shapes_dataset):
    repo = copy_example(tmp_path / "repo")
    out, logs = tmp_path / "out", tmp_path / "logs"
    data = small_shapes_dataset  # 32 training, 8 val images
    cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2",
           "--log_dir", str(logs), "train.py", "--output-dir", str(out),
           "--checkpoint-dir", str(tmp_path / "ckpt"), "--data-dir", str(data), *FLAGS]
    proc = subprocess.run(cmd, cwd=repo, env=training_env(), capture_output=True, text=True,
                          timeout=600)
    rank0 = (logs / "workerlog.0").read_text()
    rank1 = (logs / "workerlog.1").read_text()
    assert proc.returncode == 0, rank0[-3000:] + rank1[-3000:]
    assert "config: world=2" in rank0
    assert re.search(r"^step=8 epoch=1 loss=[\d.]+ images/s=", rank0, re.M)
    digests = [(out / f"rank-{r}.sha256").read_text().strip() for r in (0, 1)]
    assert digests[0] == digests[1]
    assert digests[0] != _initial_digest(3)
    assert f"weights_sha256={digests[1]}" in rank1
    assert (out / "model" / "inference.pdiparams").is_file()  # rank 0 exported


def test_metrics_endpoint_serves_training_gauges():
    train = example_module("train")
    port = free_port()
    metrics = train.Metrics(port, rank=0)
    try:
        metrics.update(step=7, epoch=1, loss=0.25, speed=42.0)
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    finally:
        metrics.close()
    text = body.decode()
    assert 'training_loss{rank="0"} 0.25' in text
    assert 'training_images_per_second{rank="0"} 42.0' in text
    assert 'training_step{rank="0"} 7.0' in text
    assert 'training_steps_total{rank="0"} 1.0' in text


def test_metrics_port_in_use_is_a_clear_error():
    train = example_module("train")
    port = free_port()
    first = train.Metrics(port, rank=0)
    try:
        try:
            train.Metrics(port, rank=0)
        except train.TrainError as exc:
            assert f"port {port}" in str(exc)
        else:
            raise AssertionError("second server on the same port did not fail")
    finally:
        first.close()
