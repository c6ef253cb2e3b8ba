"""What pinning MKL's code path costs: `--kernels reproducible` vs `--kernels fast`.

`--kernels reproducible` (the kit's default, modelkit/kernels.py) sets `MKL_CBWR=AVX2`
so one commit trains the same weights on any x86-64 CPU; `fast` lets MKL take the CPU's
own best path (AVX-512 where there is one). One training process of the shapes example,
the same steps and images, alternating fast / reproducible for `--rounds` rounds. The
cost is the CPU seconds of the whole run (start-up included, so a lower bound of the
training loop's own cost), each side's least: CPU time is what another process on a
shared machine disturbs least; the best images/s of each side is recorded too
(benchmarks/training.py says why best-of-N, alternating). Also records whether the two
trained the same weights (they do only where MKL's best path is AVX2). Saves
benchmarks/results/kernels.json.

    python benchmarks/kernels.py [--steps 30] [--rounds 3]
"""

import argparse
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from training import EXAMPLE, ROOT, run  # noqa: E402

MODES = ("fast", "reproducible")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "kernels.json"))
    args = p.parse_args()
    base = pathlib.Path(tempfile.mkdtemp(prefix="bench-kernels-"))
    rounds: dict[str, list] = {m: [] for m in MODES}
    weights: dict[str, set] = {m: set() for m in MODES}
    os.environ.pop("MKL_CBWR", None)  # the kit's choice, not an inherited one
    try:
        data = base / "data"
        subprocess.run([sys.executable, str(EXAMPLE / "shapes_data.py"), "--data-dir", str(data),
                        "--num-val", "8"], check=True, capture_output=True)
        for i in range(args.rounds):
            for mode in MODES:
                work = base / f"r{i}-{mode}"
                work.mkdir()
                r = run(1, work, data, args.steps, args.batch_size, ("--kernels", mode))
                weights[mode].add((work / "out" / "rank-0.sha256").read_text().strip())
                rounds[mode].append({**r, "kernels": mode})
                print(json.dumps(rounds[mode][-1]), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    best = {m: max(r, key=lambda x: x["images_per_second"]) for m, r in rounds.items()}
    least = {m: min(x["cpu_seconds"] for x in r) for m, r in rounds.items()}
    cost = least["reproducible"] / least["fast"] - 1
    cpu = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    report = {
        "benchmark": "MKL code path pinned (--kernels reproducible) vs the CPU's own (fast)",
        "machine": {"python": platform.python_version(), "cpu": platform.machine(),
                    "cores": os.cpu_count(), "avx512": " avx512f" in cpu},
        "steps": args.steps, "global_batch": args.batch_size,
        "best_images_per_second": best,
        "least_cpu_seconds": least,
        "reproducible_cost": round(cost, 3),
        "load_average_1m_before": [x["load_average_1m_before"] for r in rounds.values()
                                   for x in r],
        "same_weights_every_round": {m: len(w) == 1 for m, w in weights.items()},
        "fast_equals_reproducible": weights["fast"] == weights["reproducible"],
        "rounds": rounds,
    }
    pathlib.Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"reproducible kernels cost {cost:+.1%} CPU seconds ({least['reproducible']} vs "
          f"{least['fast']} for the same run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
