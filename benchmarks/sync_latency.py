"""Local sync latency: from a pushed GitOps commit to HAProxy routing by it.

    python benchmarks/sync_latency.py [--changes 20] [--model-dir DIR] [--poll-interval 0.5]

Starts the real local platform (Prometheus, HAProxy, the sync daemon, two
`mlops serve` processes) on a fresh bare GitOps repo, waits for a 90/10
split, then pushes ``--changes`` commits that each change the canary weight
in ``virtualservice.yaml`` (plain git from a clone, as a human or the
controller would). For each, the clock starts when ``git push`` returns (the
commit is in the repo) and stops when HAProxy's runtime API answers
``get weight <model>/v2`` with the new weight (polled every 5 ms). That is
the delay a rollback commit takes to reach traffic.

Without ``--model-dir`` a tiny Paddle export (random weights, the test
suite's ``tiny_model_dir`` recipe) is built: the model does not matter for
this path, only that real servers are ready. Results go to
benchmarks/results/sync_latency.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gitops import yamlio  # noqa: E402
from gitops.repo import init_repo  # noqa: E402
from mlops.platform import lifecycle  # noqa: E402
from mlops.platform.runtime import RuntimeApi  # noqa: E402
from mlops.platform.workdir import Workdir  # noqa: E402
from serving import manifests  # noqa: E402
from tests.fixtures.platform import converged, write_model  # noqa: E402

MODEL = "bench-detector"
WEIGHTS = [25, 50, 75, 100, 0, 10, 40, 60, 5, 90]


def tiny_model(dest: pathlib.Path) -> pathlib.Path:
    import yaml

    from tests.fixtures.serving import _TINY_EXPORT, TINY_INFER_CFG, server_env

    dest.mkdir(parents=True)
    script = dest.parent / "export_tiny.py"  # paddle.jit.save reads the source: not `-c`
    script.write_text(_TINY_EXPORT)
    subprocess.run([sys.executable, str(script), str(dest / "inference")],
                   check=True, capture_output=True, env=server_env(), timeout=300)
    (dest / "infer_cfg.yml").write_text(yaml.safe_dump(TINY_INFER_CFG, sort_keys=False))
    (dest / "model.yaml").write_text(yaml.safe_dump(
        {"name": MODEL, "version": "t1", "weights_sha256": "0" * 64}))
    return dest


def git(cwd: pathlib.Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--model-dir", type=pathlib.Path)
    parser.add_argument("--poll-interval", type=float, default=0.5)
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "benchmarks/results/sync_latency.json")
    args = parser.parse_args()

    base = pathlib.Path(tempfile.mkdtemp(prefix="mlops-sync-bench-"))
    wd = Workdir(base / "platform")
    try:
        source = args.model_dir or tiny_model(base / "tiny")
        versions = {}
        for version in ("v1", "v2"):
            versions[version] = base / "models" / version
            shutil.copytree(source, versions[version])
        repo = base / "gitops.git"
        init_repo(repo)
        lifecycle.up(wd, str(repo), poll_interval=args.poll_interval)
        write_model(repo, MODEL, versions, stable="v1", canary="v2", canary_weight=10)
        print("waiting for two model servers and the 90/10 split ...", flush=True)
        wait(lambda: converged(wd, MODEL, {"v1": 90, "v2": 10}), 300, "the 90/10 split")

        clone = base / "clone"
        git(base, "clone", "-q", str(repo), str(clone))
        api = RuntimeApi(wd.admin_socket())
        vs_path = clone / "apps" / MODEL / "virtualservice.yaml"
        latencies, pushes = [], []
        for i in range(args.changes):
            weight = WEIGHTS[i % len(WEIGHTS)]
            vs_path.write_text(yamlio.dump(manifests.virtual_service(MODEL, 100 - weight, weight)))
            git(clone, "commit", "-qam", f"bench: canary {weight}%")
            started = time.monotonic()
            git(clone, "push", "-q", "origin", "HEAD:main")
            pushed = time.monotonic()
            while api.get_weight(MODEL, "v2") != weight:
                if time.monotonic() - pushed > 30:
                    raise SystemExit(f"change {i}: HAProxy never showed weight {weight}")
                time.sleep(0.005)
            seen = time.monotonic()
            latencies.append(seen - pushed)
            pushes.append(pushed - started)
            print(f"change {i + 1:2d}: v2 -> {weight:3d}%  {1000 * (seen - pushed):6.0f} ms", flush=True)
            time.sleep(0.2 + (i % 5) * 0.077)  # de-phase from the poll interval
    finally:
        lifecycle.down(wd)
        shutil.rmtree(base, ignore_errors=True)

    result = {
        "benchmark": "sync_latency",
        "what": "seconds from `git push` returning to HAProxy's `get weight` showing the committed weight",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_1m": os.getloadavg()[0]},
        "poll_interval_s": args.poll_interval,
        "changes": len(latencies),
        "latency_s": {
            "p50": round(statistics.median(latencies), 4),
            "p95": round(percentile(latencies, 0.95), 4),
            "max": round(max(latencies), 4),
            "mean": round(statistics.fmean(latencies), 4),
        },
        "push_s": {"p50": round(statistics.median(pushes), 4)},
        "samples_s": [round(x, 4) for x in latencies],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["latency_s"]), "->", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
