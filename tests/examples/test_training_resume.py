"""Kill train.py with SIGKILL after a checkpoint, start it again: it continues, not restarts.

Sample order and flips are functions of (seed, epoch, step) and the checkpoint
holds model + optimizer + step, so the resumed run must end with exactly the
weights of an uninterrupted one (CPU, one thread: Paddle is deterministic).
"""

import re
import subprocess
import sys
import time

from tests.fixtures.training import copy_example, run_train, training_env

# 48 images, global batch 8 -> 6 steps per epoch, 2 epochs = 12 steps; checkpoint every 4
# (the first at step 4: a kill there leaves 8 steps to resume, across an epoch boundary).
FLAGS = ["--subset", "48", "--batch-size", "8", "--epochs", "2", "--log-every", "2",
         "--checkpoint-every", "4", "--lr", "3e-3"]
TOTAL = 12


def _losses(log):
    return {int(m[1]): float(m[2]) for m in re.finditer(r"^step=(\d+) .*?loss=([\d.]+)", log,
                                                        re.M)}


def _weights(log):
    return re.search(r"^done: rank=0 step=(\d+) weights_sha256=(\w+)", log, re.M).groups()


def test_killed_run_resumes_where_its_checkpoint_left(tmp_path, shapes_dataset):
    repo = copy_example(tmp_path / "repo")
    common = ["--data-dir", str(shapes_dataset), *FLAGS]

    straight = run_train(repo, ["--output-dir", str(tmp_path / "o1"),
                                "--checkpoint-dir", str(tmp_path / "c1"), *common])
    straight_losses = _losses(straight.stdout)
    assert _weights(straight.stdout)[0] == str(TOTAL)

    ckpt = tmp_path / "c2"
    args = ["--output-dir", str(tmp_path / "o2"), "--checkpoint-dir", str(ckpt), *common]
    first = subprocess.Popen([sys.executable, "train.py", *args], cwd=repo, env=training_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 300
        while not list(ckpt.glob("ckpt-*.pdckpt")) and first.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.05)
        first.kill()
        first_log = first.communicate(timeout=30)[0]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == -9, "training finished before it could be killed"
    assert "done:" not in first_log

    second = run_train(repo, args)
    resumed = re.search(r"^resumed from ckpt-\d+\.pdckpt at step=(\d+)", second.stdout, re.M)
    assert resumed, second.stdout
    start = int(resumed[1])
    assert 0 < start < TOTAL
    losses = _losses(second.stdout)
    assert min(losses) > start  # no step before the checkpoint was run again
    step, digest = _weights(second.stdout)
    assert int(step) == TOTAL
    # Continues the same curve: same losses as the uninterrupted run from there on...
    for s, value in losses.items():
        assert abs(value - straight_losses[s]) < 1e-3, (s, value, straight_losses[s])
    # ...far below where training starts...
    assert losses[min(losses)] < 0.8 * straight_losses[2]
    # ...and the very same final weights.
    assert digest == _weights(straight.stdout)[1]


def test_checkpoint_from_another_config_is_refused(tmp_path, trained_model):
    """Resuming someone else's run would silently mix schedules: refuse, say what to do."""
    proc = subprocess.run(
        [sys.executable, "train.py", "--output-dir", str(tmp_path / "out"),
         "--checkpoint-dir", str(trained_model.checkpoint_dir),
         "--data-dir", str(trained_model.data_dir), "--subset", "640", "--batch-size", "32"],
        cwd=trained_model.repo_dir, env=training_env(), capture_output=True, text=True,
        timeout=300)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: checkpoint ") and last.endswith("use a fresh --checkpoint-dir")
    assert "Traceback" not in proc.stderr
