"""Same commit, same weights, whatever MKL code path the CPU would pick (modelkit/kernels.py).

MKL chooses its code path from the CPU; `MKL_ENABLE_INSTRUCTIONS` caps it, which
plays "another CPU" on this one (Intel's documentation of the variable: the highest
instruction set MKL dispatches to). Two code paths: the machine's best, and one
below it (AVX2 on an AVX-512 host, AVX on an AVX2 one). Unpinned, the two train
different weights (so the test cannot pass vacuously); pinned, the same. The pin is
the kit's default (`--kernels reproducible`, `MKL_CBWR=AVX2`) where the lower path
is AVX2; on a host without AVX-512, the pin is an operator's `MKL_CBWR=AVX`, which
the kit keeps and records.
"""

import pathlib
import subprocess
import sys

import pytest
import yaml

from tests.fixtures.training import EXAMPLE, training_env


def _has_avx512() -> bool:
    try:
        return " avx512f" in pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


LOWER, PIN = ("AVX2", None) if _has_avx512() else ("AVX", "AVX")


def _train(tmp: pathlib.Path, data: pathlib.Path, kernels: str, cap: str | None) -> str:
    out = tmp / f"{kernels}-{cap or 'best'}"
    env = training_env()
    env.pop("MKL_CBWR", None)
    env.pop("MKL_ENABLE_INSTRUCTIONS", None)
    if cap:
        env["MKL_ENABLE_INSTRUCTIONS"] = cap
    if PIN and kernels == "reproducible":
        env["MKL_CBWR"] = PIN
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE / "train.py"), "--data-dir", str(data),
         "--output-dir", str(out), "--checkpoint-dir", str(out / "ckpt"), "--epochs", "2",
         "--batch-size", "16", "--kernels", kernels, "--log-every", "100"],
        env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return (out / "rank-0.sha256").read_text().strip()


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    data = tmp_path_factory.mktemp("kernels") / "data"
    subprocess.run([sys.executable, str(EXAMPLE / "shapes_data.py"), "--data-dir", str(data),
                    "--num-train", "64", "--num-val", "8"], check=True, capture_output=True)
    return data


def test_pinned_kernels_train_the_same_weights_on_two_code_paths_and_say_so(tmp_path, tiny_data):
    unpinned = {cap: _train(tmp_path, tiny_data, "fast", cap) for cap in (None, LOWER)}
    assert unpinned[None] != unpinned[LOWER], (
        f"MKL's best path and {LOWER} trained the same weights: the test would prove nothing")
    pinned = {cap: _train(tmp_path, tiny_data, "reproducible", cap) for cap in (None, LOWER)}
    assert pinned[None] == pinned[LOWER]
    # and the record says which code path trained the weights
    record = yaml.safe_load((tmp_path / "reproducible-best" / "model" / "model.yaml").read_text())
    assert record["hyperparameters"]["kernels"] == (PIN or "AVX2")

