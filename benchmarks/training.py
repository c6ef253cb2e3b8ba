"""Training throughput of the example detector: 1 process vs 2 data-parallel processes.

Both runs do the same global work (same global batch, same number of steps,
same images) with one OMP thread per process; the number reported is the
steady-state images/s that ``train.py`` logs (first log window dropped: it
includes start-up), plus the wall time of the whole command. Target: two
processes >= 1.5x one on a 2-core machine.

Why best-of-N, alternating: on a shared machine any other process steals a
core, and a 2-process run (which needs both cores, and whose ranks wait for
each other at every gradient all-reduce) suffers far more than a 1-process
run that has a spare core. Alternating 1/2/1/2... and keeping each side's best
round compares the two under the least interference; every round and the
load average before it are recorded too.

    python benchmarks/training.py [--steps 30] [--rounds 3] [--out benchmarks/results/training.json]
"""

import argparse
import json
import os
import pathlib
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "shapes-detector"


def run(nproc, work, data_dir, steps, batch, extra=()):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", GLOG_minloglevel="2")
    flags = ["--output-dir", str(work / "out"), "--checkpoint-dir", str(work / "ckpt"),
             "--data-dir", str(data_dir), "--batch-size", str(batch), "--max-steps", str(steps),
             "--subset", str(20 * batch),
             "--log-every", "5", "--checkpoint-every", str(10 * steps), *extra]
    if nproc == 1:
        cmd = [sys.executable, str(EXAMPLE / "train.py"), *flags]
    else:
        cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(nproc),
               "--log_dir", str(work / "logs"), str(EXAMPLE / "train.py"), *flags]
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    log = proc.stdout if nproc == 1 else (work / "logs" / "workerlog.0").read_text()
    if proc.returncode != 0:
        raise SystemExit(f"{nproc}-process run failed:\n{log[-2000:]}\n{proc.stderr[-2000:]}")
    speeds = [float(m) for m in re.findall(r"^step=\d+ .*images/s=([\d.]+)", log, re.M)]
    return {"processes": nproc, "steps": steps, "global_batch": batch,
            "images": steps * batch, "images_per_second": round(statistics.mean(speeds[1:]), 2),
            "windows": speeds, "wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
            "load_average_1m_before": round(load_before, 2)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "training.json"))
    args = p.parse_args()
    base = pathlib.Path(tempfile.mkdtemp(prefix="bench-training-"))
    rounds = {1: [], 2: []}
    try:
        data = base / "data"
        subprocess.run([sys.executable, str(EXAMPLE / "shapes_data.py"), "--data-dir", str(data)],
                       check=True, capture_output=True)
        for i in range(args.rounds):
            for nproc in (1, 2):
                work = base / f"r{i}-p{nproc}"
                work.mkdir()
                rounds[nproc].append(run(nproc, work, data, args.steps, args.batch_size))
                print(json.dumps(rounds[nproc][-1]), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    best = {n: max(r, key=lambda x: x["images_per_second"]) for n, r in rounds.items()}
    ratio = best[2]["images_per_second"] / best[1]["images_per_second"]
    per_round = [b["images_per_second"] / a["images_per_second"]
                 for a, b in zip(rounds[1], rounds[2])]
    report = {
        "benchmark": "training throughput, 1 vs 2 data-parallel processes (gloo, CPU)",
        "cpus": os.cpu_count(),
        "one_process_best": best[1],
        "two_processes_best": best[2],
        "ratio_images_per_second": round(ratio, 3),
        "ratio_per_round": [round(r, 3) for r in per_round],
        "target_ratio": 1.5,
        "meets_target": ratio >= 1.5,
        "rounds": {"one_process": rounds[1], "two_processes": rounds[2]},
        "note": "shared machine: best round per side; see per-round ratios and load averages",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"2 processes / 1 process = {ratio:.2f}x images/s -> {out}")


if __name__ == "__main__":
    main()
