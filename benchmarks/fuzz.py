"""Request fuzzing: no client input may yield a 5xx (issue 26).

    python benchmarks/fuzz.py [--minutes 10] [--out benchmarks/results/fuzz.json]

Builds two small exports (the tiny detector in the example's format without its
deliberate shape trap, and a PaddleDetection-format export; neither declares a fault
drill, whose 5xx are on purpose), serves each with a real `mlops serve` (one predictor
thread), and sends them, in turn, batches of requests drawn from
`tests/fuzz_requests.py` (valid requests for every inference route, mutated at random
by Hypothesis) until the time is up. Every answer is counted by route and status; a
5xx is saved with its request (enough to send it again). Between batches both servers
must answer ready. Reported (and saved): requests, statuses per model and route, the
5xx found (none is the target), each server's RSS at the start and the end, and the
machine's load (2 cores shared with other jobs).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import platform
import shutil
import sys
import tempfile
import time
from typing import Any

import requests
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.serving import build_tiny_export, start_server, stop_server  # noqa: E402
from tests.fuzz_requests import Target, fuzz_request, send  # noqa: E402
from tests.ppdet_export import build_ppdet_export  # noqa: E402

BATCH = 100  # requests per Hypothesis run; a fresh seed each run


def _batch(target: Target, run_seed: int, tally: dict[str, Any]) -> None:
    """One Hypothesis run of `BATCH` requests, each answer counted (never asserted: a
    5xx is recorded and the run goes on, so one finding does not end the search)."""

    @seed(run_seed)
    @settings(max_examples=BATCH, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        request = data.draw(fuzz_request(target))
        try:
            answer = send(target, request)
            status = str(answer.status_code)
        except requests.RequestException as exc:  # no answer at all counts as a failure
            status, answer = f"no answer ({type(exc).__name__})", None
        tally["statuses"][request.route][status] += 1
        tally["requests"] += 1
        if answer is None or answer.status_code >= 500:
            found = request.describe()
            found["status"] = status
            found["answer"] = answer.text[:500] if answer is not None else None
            tally["server_errors"].append(found)

    run()


def _rss(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--out", type=pathlib.Path,
                        default=ROOT / "benchmarks" / "results" / "fuzz.json")
    args = parser.parse_args()
    base = pathlib.Path(tempfile.mkdtemp(prefix="mlops-fuzz-"))
    servers = []
    load_before = os.getloadavg()
    try:
        print("building the two exports ...", flush=True)
        example_dir = build_tiny_export(base / "example" / "model", sturdy=True)
        ppdet_dir = build_ppdet_export(base / "ppdet" / "model")
        for model_dir in (example_dir, ppdet_dir):
            servers.append(start_server(model_dir, "--threads", "1", log_dir=base))
        targets = {
            "example": Target(servers[0].url, servers[0].model_name, servers[0].model_version,
                              (("image", 3),), "image_bytes"),
            "ppdet": Target(servers[1].url, servers[1].model_name, servers[1].model_version,
                            (("image", 3), ("im_shape", -1), ("scale_factor", -1)), "image"),
        }
        rss_start = {name: _rss(s.process.pid) for name, s in zip(targets, servers)}
        tallies = {name: {"requests": 0, "server_errors": [],
                          "statuses": collections.defaultdict(collections.Counter)}
                   for name in targets}
        start = time.monotonic()
        run_seed, not_ready = 0, []
        while time.monotonic() - start < args.minutes * 60:
            for name, target in targets.items():
                _batch(target, run_seed, tallies[name])
                ready = requests.get(f"{target.url}/v2/health/ready", timeout=10)
                if ready.status_code != 200:
                    not_ready.append({"model": name, "after_run": run_seed,
                                      "status": ready.status_code})
            run_seed += 1
            total = sum(t["requests"] for t in tallies.values())
            errors = sum(len(t["server_errors"]) for t in tallies.values())
            print(f"{time.monotonic() - start:6.0f} s: {total} requests, {errors} 5xx",
                  flush=True)
        elapsed = time.monotonic() - start
        rss_end = {name: _rss(s.process.pid) for name, s in zip(targets, servers)}
    finally:
        for server in servers:
            stop_server(server)
        shutil.rmtree(base, ignore_errors=True)
    total = sum(t["requests"] for t in tallies.values())
    errors = sum(len(t["server_errors"]) for t in tallies.values())
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
        "command": f"python benchmarks/fuzz.py --minutes {args.minutes:g}",
        "seconds": round(elapsed, 1),
        "requests": total,
        "requests_per_second": round(total / elapsed, 1),
        "server_errors": errors,
        "not_ready_between_runs": not_ready,
        "models": {
            name: {
                "requests": t["requests"],
                "statuses_by_route": {route: dict(sorted(c.items()))
                                      for route, c in sorted(t["statuses"].items())},
                "server_errors": t["server_errors"][:20],
                "rss_mb": {"start": round(rss_start[name] / 2 ** 20),
                           "end": round(rss_end[name] / 2 ** 20)},
            } for name, t in tallies.items()
        },
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_before": [round(x, 2) for x in load_before],
                    "load_after": [round(x, 2) for x in os.getloadavg()],
                    "note": "2 cores shared with other jobs running at the same time"},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{total} requests in {elapsed:.0f} s, {errors} answered 5xx; "
          f"written to {args.out}")
    return 1 if errors or not_ready else 0


if __name__ == "__main__":
    raise SystemExit(main())
