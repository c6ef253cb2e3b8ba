"""Evaluation time: our evaluator (faster-coco-eval) vs pycocotools' COCOeval.

Same ground truth (the example's generated val set, or a larger synthetic
one) and the same detections (noisy copies of the ground truth plus false
positives, seeded), timed in one run, best of several repeats. Both mAP
numbers are printed to show they agree. Saves benchmarks/results/evaluation.json.

    python benchmarks/evaluation.py [--images 2000] [--repeats 5]
"""

import argparse
import contextlib
import io
import json
import pathlib
import platform
import random
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402

from workflows.evaluation import evaluate_detections  # noqa: E402


def make_gt(images: int, seed: int) -> dict:
    rng = random.Random(seed)
    imgs = [
        {"id": i, "width": 128, "height": 128, "file_name": f"{i}.png"}
        for i in range(1, images + 1)
    ]
    anns = []
    for img in imgs:
        for _ in range(rng.randint(2, 6)):
            w, h = rng.uniform(8, 40), rng.uniform(8, 40)
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": img["id"],
                    "category_id": rng.randint(1, 3),
                    "bbox": [rng.uniform(0, 128 - w), rng.uniform(0, 128 - h), w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
    cats = [{"id": 1, "name": "circle"}, {"id": 2, "name": "square"}, {"id": 3, "name": "triangle"}]
    return {"images": imgs, "annotations": anns, "categories": cats}


def make_dets(gt: dict, seed: int) -> list:
    rng = random.Random(seed)
    dets = []
    for ann in gt["annotations"]:
        x, y, w, h = ann["bbox"]
        dets.append(
            {
                "image_id": ann["image_id"],
                "category_id": ann["category_id"],
                "score": rng.random(),
                "bbox": [
                    x + rng.gauss(0, 1.5),
                    y + rng.gauss(0, 1.5),
                    w * rng.uniform(0.85, 1.15),
                    h * rng.uniform(0.85, 1.15),
                ],
            }
        )
    for img in gt["images"]:
        for _ in range(10):  # low-score false positives, as a real top-k decoder emits
            dets.append(
                {
                    "image_id": img["id"],
                    "category_id": rng.randint(1, 3),
                    "score": rng.random() * 0.3,
                    "bbox": [rng.uniform(0, 100), rng.uniform(0, 100), 20, 20],
                }
            )
    return dets


def pycocotools_map(gt_path: pathlib.Path, dt_path: pathlib.Path) -> dict:
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(gt_path))
        ev = COCOeval(gt, gt.loadRes(str(dt_path)), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return {"map": float(ev.stats[0]), "map50": float(ev.stats[1])}


def best_of(repeats: int, func):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "evaluation.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        gt_path, dt_path = pathlib.Path(tmp) / "gt.json", pathlib.Path(tmp) / "dt.json"
        gt = make_gt(args.images, seed=0)
        dets = make_dets(gt, seed=1)
        gt_path.write_text(json.dumps(gt))
        dt_path.write_text(json.dumps(dets))
        ours_s, ours = best_of(args.repeats, lambda: evaluate_detections(gt_path, dt_path))
        ref_s, ref = best_of(args.repeats, lambda: pycocotools_map(gt_path, dt_path))
    result = {
        "benchmark": "evaluation",
        "machine": {"python": platform.python_version(), "cpu": platform.machine()},
        "images": args.images, "annotations": len(gt["annotations"]), "detections": len(dets),
        "repeats": args.repeats,
        "ours_seconds": round(ours_s, 4), "pycocotools_seconds": round(ref_s, 4),
        "speedup": round(ref_s / ours_s, 2),
        "ours": {"map": ours["map"], "map50": ours["map50"]}, "pycocotools": ref,
        "max_abs_difference": max(abs(ours["map"] - ref["map"]), abs(ours["map50"] - ref["map50"])),
    }
    pathlib.Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{args.images} images, {len(dets)} detections: ours {ours_s:.3f}s, "
        f"pycocotools {ref_s:.3f}s "
        f"({result['speedup']}x); mAP@0.5 {ours['map50']:.6f} vs {ref['map50']:.6f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
