"""Dataset pins at 20k images: `snapshot` and `prepare` (cold and warm cache) timed.

    python benchmarks/data_pins.py [--images 20000] [--workers 8] [--work DIR]
                                   [--out benchmarks/results/data_pins.json]

Generates a COCO dataset in the pinned layout (16x16 random-pixel PNGs, about 0.9 kB
each, two boxes per image; 80 % train, 10 % val, 10 % holdout) with the tests' own
generator (tests/fixtures/data.py), then times, from a directory source:
`snapshot` (hash every image, write the lock), `prepare` into an empty cache (fetch,
verify, validate: schema, ids, boxes, `Image.verify()` of each image, overlap; link
into the workspace) and `prepare` again into a new workspace with the cache warm.
Files/s count every pinned file (annotation files and images). The peak RSS says
whether memory stays bounded: it is the process's high-water mark after all stages.
Tiny files make this a per-file-overhead benchmark (open, hash, link, PIL header),
which is what 100k-image datasets cost; bandwidth is not measured.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import resource
import shutil
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from datapins.cache import Cache  # noqa: E402
from datapins.lock import read_lock, write_lock  # noqa: E402
from datapins.prepare import prepare  # noqa: E402
from datapins.snapshot import snapshot  # noqa: E402
from datapins.sources import open_source  # noqa: E402
from tests.fixtures.data import write_coco_dataset  # noqa: E402


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
    t = time.perf_counter()
    source = write_coco_dataset(work / "source", split)
    generate_s = time.perf_counter() - t

    t = time.perf_counter()
    lock = snapshot(open_source(str(source)), "bench", workers=args.workers)
    write_lock(lock, work / "data.lock.json")
    snapshot_s = time.perf_counter() - t
    lock = read_lock(work / "data.lock.json")
    files = sum(1 + len(s.images) for s in lock.splits.values())

    cache = Cache(work / "cache")
    src = open_source(str(source))
    t = time.perf_counter()
    cold = prepare(lock, work / "ws-cold", cache, src, workers=args.workers)
    cold_s = time.perf_counter() - t
    t = time.perf_counter()
    warm = prepare(lock, work / "ws-warm", cache, src, workers=args.workers)
    warm_s = time.perf_counter() - t

    result = {
        "images": n, "files": files, "splits": split, "workers": args.workers,
        "lock_file_bytes": (work / "data.lock.json").stat().st_size,
        "dataset_bytes": sum(p.stat().st_size for p in source.rglob("*") if p.is_file()),
        "generate_s": round(generate_s, 2),
        "snapshot": {"seconds": round(snapshot_s, 2), "files_per_s": round(files / snapshot_s)},
        "prepare_cold": {"seconds": round(cold_s, 2), "files_per_s": round(files / cold_s),
                         "fetched": cold.fetched, "cache_hits": cold.hits},
        "prepare_warm": {"seconds": round(warm_s, 2), "files_per_s": round(files / warm_s),
                         "fetched": warm.fetched, "cache_hits": warm.hits},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores (shared)",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
