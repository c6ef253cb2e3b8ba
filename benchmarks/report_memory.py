"""Canary-report memory: what writing a rollout's report costs a long-lived controller.

    python benchmarks/report_memory.py [--reports 20] [--out FILE]

The soak (issue 16) saw the controller's RSS grow 7-10 % per process while
servers and sync stayed flat. This benchmark isolates the suspect, the canary
report's plot, in two fresh child processes of this script, each importing
what `mlops controller run` imports and then writing `--reports` canary reports
of a 40-interval timeline:

* **in-process**: `plot_timeline` called in the process itself (how the
  controller drew its PNG before);
* **child**: `write_canary_report`, which draws in a spawned child process.

Each reports its RSS after the imports, after the first report and after the
last one, and whether matplotlib was imported into it. Results go to
benchmarks/results/report_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent

# Runs in a fresh interpreter: RSS must not carry this script's own imports.
_PROBE = r"""
import json, os, pathlib, sys, tempfile
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
import promotion.controller  # noqa: F401  what `mlops controller run` imports
from promotion.reports import report
mode, reports = sys.argv[1], int(sys.argv[2])
points = [{"t": i * 5.0, "weight": min(100, i * 10),
           "stable": {"rps": 10.0, "error_rate": 0.0, "p99_ms": 5.0},
           "canary": {"rps": 1.0, "error_rate": 0.001 * i, "p99_ms": 6.0},
           "decision": "step" if i % 3 == 0 else None} for i in range(40)]
out = {"after_imports_mb": round(rss_mb(), 1)}
work = pathlib.Path(tempfile.mkdtemp())
for n in range(reports):
    directory = work / f"v{n}"
    if mode == "in-process":
        directory.mkdir()
        report.plot_timeline(points, directory / "canary.png", "bench")
    else:
        report.write_canary_report(directory, "bench", "v0", f"v{n}", "promoted", [], points)
    assert (directory / "canary.png").stat().st_size > 1000
    if n == 0:
        out["after_first_mb"] = round(rss_mb(), 1)
out["after_last_mb"] = round(rss_mb(), 1)
out["matplotlib_imported"] = "matplotlib" in sys.modules
print(json.dumps(out))
"""


def _probe(mode: str, reports: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "MPLCONFIGDIR": tempfile.mkdtemp(prefix="mpl-")}
    done = subprocess.run([sys.executable, "-c", _PROBE, mode, str(reports)], env=env,
                          cwd=ROOT, capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    first, last = result["after_first_mb"], result["after_last_mb"]
    result["growth_after_first_pct"] = round((last / first - 1) * 100, 2)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reports", type=int, default=20)
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "report_memory.json")
    args = ap.parse_args(argv)
    results = {"benchmark": "report_memory", "reports": args.reports,
               "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
               "modes": {mode: _probe(mode, args.reports) for mode in ("in-process", "child")}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    for mode, r in results["modes"].items():
        print(f"{mode:<11} imports {r['after_imports_mb']:6.1f} MB  first report "
              f"{r['after_first_mb']:6.1f} MB  after {args.reports}: {r['after_last_mb']:6.1f} MB "
              f"({r['growth_after_first_pct']:+.1f} %)  matplotlib in process: "
              f"{r['matplotlib_imported']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
