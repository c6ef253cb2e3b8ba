"""Push to canary start, split into its parts, and push to promoted.

    python benchmarks/push_to_promoted.py [--scenario good] [--from-demo WORKDIR]

Plays `mlops demo --scenario good` in a fresh work dir (real git push, hook,
2-process training, gate, PR, approval, sync, canary under 40 requests/s)
and reads the instants the demo recorded in its `summary.json`:

    push ─ pipeline overhead ─ training ─ evaluation ─ proposal ─ approval ─ sync
         ─ canary start ─ canary ─ promoted

The parts add up to push-to-canary-start (see `mlops/demo/timeline.py`).
The baseline in the same run is the first push (the bootstrap), which has no
canary: its push-to-serving is the pipeline and the sync alone, so the
difference between the two rows is what the candidate's canary costs.
Approval is the demo's (a command, instant); with a human it is review time.
`--from-demo DIR` re-reads an earlier demo's summary instead of playing.
Results: benchmarks/results/push_to_promoted.json.
"""

import argparse
import datetime as dt
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlops.demo import timeline  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "push_to_promoted.json"


def rows(summary: dict) -> list[dict]:
    """One row per push: its parts and totals (from the demo's recorded instants)."""
    out = []
    for record in summary["scenarios"]:
        run_json = pathlib.Path(record["run_report"]).with_name("run.json")
        run = json.loads(run_json.read_text()) if run_json.is_file() else {"tasks": []}
        out.append({"scenario": record["scenario"], "version": record["version"],
                    "outcome": record["outcome"], "map50": record["map50"],
                    **timeline.breakdown(record["marks"], run)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="good")
    parser.add_argument("--from-demo", help="an earlier demo's work dir (its summary.json)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    load_before = os.getloadavg()
    if args.from_demo:
        work = pathlib.Path(args.from_demo)
        wall = None
    else:
        work = pathlib.Path(tempfile.mkdtemp(prefix="push-to-promoted-")) / "demo"
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "mlops", "demo", "--workdir", str(work),
                               "--scenario", args.scenario], cwd=work.parent)
        wall = round(time.monotonic() - t0, 1)
        if proc.returncode != 0:
            print(f"the demo failed ({proc.returncode}); nothing saved", file=sys.stderr)
            return 1
    if not (work / "summary.json").is_file():
        print(f"error: {work / 'summary.json'} not found: not the work dir of a finished demo",
              file=sys.stderr)
        return 2
    summary = json.loads((work / "summary.json").read_text())
    result = {
        "benchmark": "push_to_promoted",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cores": os.cpu_count(),
                    "load_before": [round(x, 2) for x in load_before],
                    "load_after": [round(x, 2) for x in os.getloadavg()]},
        "demo_seconds": summary.get("seconds"),
        "wall_seconds": wall,
        "pushes": rows(summary),
    }
    pathlib.Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for row in result["pushes"]:
        parts = "  ".join(f"{k[:-2]} {v:.1f}s" for k, v in row["parts"].items())
        total = row.get("push_to_canary_start_s")
        print(
            f"{row['scenario']:<10} {row['outcome']:<13} push->canary start "
            f"{total if total is not None else '-'}s  "
            f"push->end {row.get('push_to_finished_s', '-')}s"
        )
        print(f"           {parts}")
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
