"""What the local-platform benchmarks share: a scratch platform, a tiny model, waits, summaries.

`sync_latency.py` and `rollback_latency.py` both start the real local platform
(Prometheus, HAProxy, the sync, `mlops serve` processes) on a fresh bare GitOps
repo in a temp dir, serve a tiny random-weight Paddle export, wait for a split
and report percentiles with the machine's load next to them (on 2 shared
cores the load explains much of the spread).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Iterator

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gitops.repo import init_repo  # noqa: E402
from local.platform import lifecycle  # noqa: E402
from local.platform.workdir import Workdir  # noqa: E402
from tests.fixtures.platform import converged  # noqa: E402
from tests.fixtures.serving import _TINY_EXPORT, TINY_INFER_CFG, server_env  # noqa: E402


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[tuple[pathlib.Path, Workdir]]:
    """A temp dir and a platform work dir in it; the platform is downed and all removed after."""
    base = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    wd = Workdir(base / "platform")
    try:
        yield base, wd
    finally:
        lifecycle.down(wd)
        shutil.rmtree(base, ignore_errors=True)


def start_platform(base: pathlib.Path, wd: Workdir, poll_interval: float) -> pathlib.Path:
    """Init a bare GitOps repo in ``base`` and bring the platform up on it; return the repo."""
    repo = base / "gitops.git"
    init_repo(repo)
    lifecycle.up(wd, str(repo), poll_interval=poll_interval)
    return repo


def wait_for_split(wd: Workdir, model: str, weights: dict[str, int]) -> None:
    split = "/".join(str(w) for w in weights.values())
    print(f"waiting for {len(weights)} model servers and the {split} split ...", flush=True)
    wait(lambda: converged(wd, model, weights), 300, f"the {split} split")


def tiny_model(dest: pathlib.Path) -> pathlib.Path:
    """A tiny random-weight Paddle export (the serving tests' recipe), without model.yaml.

    Only real, ready servers matter on the paths these benchmarks time, not the model.
    """

    dest.mkdir(parents=True)
    script = dest.parent / "export_tiny.py"  # paddle.jit.save reads the source: not `-c`
    script.write_text(_TINY_EXPORT)
    subprocess.run([sys.executable, str(script), str(dest / "inference")],
                   check=True, capture_output=True, env=server_env(), timeout=300)
    (dest / "infer_cfg.yml").write_text(yaml.safe_dump(TINY_INFER_CFG, sort_keys=False))
    return dest


def model_version(src: pathlib.Path, dest: pathlib.Path, model: str, version: str) -> pathlib.Path:
    """A copy of the tiny export at `dest` with its own `model.yaml` (name, version, digest)."""

    shutil.copytree(src, dest)
    sha = hashlib.sha256((dest / "inference.pdiparams").read_bytes()).hexdigest()
    (dest / "model.yaml").write_text(yaml.safe_dump(
        {"name": model, "version": version, "weights_sha256": sha,
         "metrics": {"map50": 0.5}}, sort_keys=False))
    return dest


def wait(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(interval)


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 4),
            "p95": round(percentile(values, 0.95), 4),
            "max": round(max(values), 4), "mean": round(statistics.fmean(values), 4)}


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "loadavg_1m": os.getloadavg()[0]}
