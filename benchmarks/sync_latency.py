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
import shutil
import statistics
import subprocess
import sys
import time

import yaml
from _platform import (  # first: it puts the repo root on sys.path
    ROOT,
    machine,
    scratch,
    start_platform,
    summary,
    tiny_model,
    wait_for_split,
)

from gitops import yamlio
from local.platform.haproxy import RuntimeApi
from serving import manifests
from tests.fixtures.platform import write_model

MODEL = "bench-detector"
WEIGHTS = [25, 50, 75, 100, 0, 10, 40, 60, 5, 90]


def git(cwd: pathlib.Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--model-dir", type=pathlib.Path)
    parser.add_argument("--poll-interval", type=float, default=0.5)
    parser.add_argument(
        "--out", type=pathlib.Path, default=ROOT / "benchmarks/results/sync_latency.json"
    )
    args = parser.parse_args()

    with scratch("mlops-sync-bench-") as (base, wd):
        source = args.model_dir
        if source is None:
            source = tiny_model(base / "tiny")
            (source / "model.yaml").write_text(yaml.safe_dump(
                {"name": MODEL, "version": "t1", "weights_sha256": "0" * 64}))
        versions = {}
        for version in ("v1", "v2"):
            versions[version] = base / "models" / version
            shutil.copytree(source, versions[version])
        repo = start_platform(base, wd, args.poll_interval)
        write_model(repo, MODEL, versions, stable="v1", canary="v2", canary_weight=10)
        wait_for_split(wd, MODEL, {"v1": 90, "v2": 10})

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
            print(
                f"change {i + 1:2d}: v2 -> {weight:3d}%  {1000 * (seen - pushed):6.0f} ms",
                flush=True,
            )
            time.sleep(0.2 + (i % 5) * 0.077)  # de-phase from the poll interval

    result = {
        "benchmark": "sync_latency",
        "what": "seconds from `git push` returning to HAProxy's "
                "`get weight` showing the committed weight",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "poll_interval_s": args.poll_interval,
        "changes": len(latencies),
        "latency_s": summary(latencies),
        "push_s": {"p50": round(statistics.median(pushes), 4)},
        "samples_s": [round(x, 4) for x in latencies],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["latency_s"]), "->", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
