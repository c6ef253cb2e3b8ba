"""Dataset pins at 20k images: `snapshot` and `prepare` (cold and warm cache) timed.

    python benchmarks/data_pins.py [--images 20000] [--workers 8] [--work DIR]
                                   [--out benchmarks/results/data_pins.json]

Generates a COCO dataset in the pinned layout (16x16 random-pixel PNGs, about 0.9 kB
each, two boxes per image; 80 % train, 10 % val, 10 % holdout) with the tests' own
generator (tests/fixtures/data.py), then times, from a directory source:
`snapshot` (hash every image, write the lock), `prepare` into an empty cache (fetch,
verify, validate: schema, ids, boxes, `Image.verify()` of each image, overlap; link
into the workspace) and `prepare` again into a new workspace with the cache warm.
Each stage runs as the CLI does, `python -m mlops data ...` in a child process, so its
peak RSS (from `wait4`) is that stage's alone. Files/s count every pinned file
(annotation files and images). A `--work` directory that already holds a generated
dataset is reused (generating 100k images takes minutes).
Tiny files make this a per-file-overhead benchmark (open, hash, link, PIL header),
which is what 100k-image datasets cost; bandwidth is not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.data import write_coco_dataset  # noqa: E402


def _stage(*argv: str) -> dict[str, object]:
    """Run `mlops data ARGV` in a child; its seconds, peak RSS and printed line."""
    out = tempfile.TemporaryFile()
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "mlops", "data", *argv], stdout=out,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    line = out.read().decode().strip()
    if proc.returncode:
        raise SystemExit(f"mlops data {' '.join(argv)}: exit {proc.returncode}: {line}")
    return {"seconds": round(seconds, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024),
            "line": line}


def _counts(line: str) -> dict[str, int]:
    fetched = re.search(r"(\d+) fetched", line)
    hits = re.search(r"(\d+) from the cache", line)
    return {"fetched": int(fetched.group(1)) if fetched else 0,
            "cache_hits": int(hits.group(1)) if hits else 0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--work", type=pathlib.Path, default=None)
    parser.add_argument("--out", type=pathlib.Path,
                        default=ROOT / "benchmarks" / "results" / "data_pins.json")
    args = parser.parse_args()
    work = args.work or pathlib.Path(tempfile.mkdtemp(prefix="data-pins-"))
    n = args.images
    split = {"train": n - 2 * (n // 10), "val": n // 10, "holdout": n // 10}
    source = work / "source"
    generate_s = 0.0
    if not (source / "annotations" / "train.json").is_file():
        t = time.perf_counter()
        write_coco_dataset(source, split)
        generate_s = time.perf_counter() - t
    lock, cache = work / "data.lock.json", work / "cache"
    for old in (cache, work / "ws-cold", work / "ws-warm"):
        shutil.rmtree(old, ignore_errors=True)
    w = ["--workers", str(args.workers)]
    load_before = round(os.getloadavg()[0], 1)
    baseline = _stage("--help")  # the interpreter and the CLI's imports, no data
    snap = _stage("snapshot", str(source), "--name", "bench", "--out", str(lock), *w)
    cold = _stage("prepare", str(lock), "--dest", str(work / "ws-cold"), "--cache", str(cache), *w)
    warm = _stage("prepare", str(lock), "--dest", str(work / "ws-warm"), "--cache", str(cache), *w)
    files = n + len(split)
    stages = {"snapshot": snap, "prepare_cold": cold, "prepare_warm": warm}
    for name, stage in stages.items():
        stage["files_per_s"] = round(files / float(stage["seconds"]))  # type: ignore[arg-type]
        if name != "snapshot":
            stage.update(_counts(str(stage["line"])))
        del stage["line"]
    result = {
        "images": n, "files": files, "splits": split, "workers": args.workers,
        "lock_file_bytes": lock.stat().st_size,
        "dataset_bytes": sum(p.stat().st_size for p in source.rglob("*") if p.is_file()),
        "generate_s": round(generate_s, 2), **stages,
        "cli_baseline_rss_mb": baseline["peak_rss_mb"], "load_before": load_before,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
