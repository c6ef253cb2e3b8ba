"""What `mlops serve --reduced-decode` changes in the answers, and what it saves.

    python benchmarks/reduced_decode.py --model-dir OUT/model [--data-dir DATA] [--images 40]
                                        [--out benchmarks/results/reduced_decode.json]

12 MP photos (4000x3000 JPEGs at quality 90) with their true boxes, of two kinds:
`val`, the example's validation images (`--data-dir`) upscaled (bicubic), what the
model knows, seen at a phone's resolution; `rendered`, the example's scenes drawn at
3000x3000 (`shapes_data.render_image`, sizes scaled; lines, noise and edges at that
resolution, which a briefly trained model knows less) and stretched to 4000x3000.
Each is sent through `ModelService.infer_body` (the server's own request work,
in-process, one predictor thread) twice: decoded whole, and decoded at libjpeg's
reduced DCT scale (`--reduced-decode`; 1/8 here, the model's input is 128x128).
Reported per kind and mode: the request time (median, p90), the precision and recall
at IoU 0.5 of the detections a user draws (score >= `draw_threshold`); and between
the modes, for the drawn detections and for all of score >= 0.1: images whose
detections are the same (same count, each matched at IoU >= 0.9 with the same class),
the mean and least IoU and the mean score difference of matched detections.
`--model-dir`: a trained shapes-detector export (`python train.py ... --output-dir
OUT` in examples/shapes-detector; the run recorded used the test suite's small
configuration).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import pathlib
import random
import statistics
import sys
import time
from typing import Any

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "shapes-detector"))

import shapes_data  # noqa: E402
from PIL import Image  # noqa: E402

from serving.modeldir import load_model_dir  # noqa: E402
from serving.preprocess import ImageOptions  # noqa: E402
from serving.runtime import PredictorPool  # noqa: E402
from serving.service import ModelService  # noqa: E402

SIDE, WIDTH = 3000, 4000


def photo(rng: random.Random) -> tuple[bytes, list[tuple[int, tuple[float, ...]]]]:
    """A 4000x3000 JPEG of a shapes scene and its objects (category, box in its pixels)."""
    scale = SIDE / shapes_data.DEFAULT_PARAMS["image_size"]
    params = dict(shapes_data.DEFAULT_PARAMS, image_size=SIDE,
                  min_size=int(shapes_data.DEFAULT_PARAMS["min_size"] * scale),
                  max_size=int(shapes_data.DEFAULT_PARAMS["max_size"] * scale))
    image, objects = shapes_data.render_image(rng, params)

    image = image.resize((WIDTH, SIDE), Image.Resampling.BICUBIC)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    stretch = WIDTH / SIDE
    return out.getvalue(), [(cat, (x0 * stretch, y0, x1 * stretch, y1))
                            for cat, (x0, y0, x1, y1) in objects]


def upscaled(image: np.ndarray, boxes: list[tuple[int, tuple[float, ...]]]
             ) -> tuple[bytes, list[tuple[int, tuple[float, ...]]]]:
    """A validation image at 4000x3000 as a JPEG, its boxes scaled with it."""

    height, width = image.shape[:2]
    out = io.BytesIO()
    Image.fromarray(image).resize((WIDTH, SIDE), Image.Resampling.BICUBIC).save(
        out, "JPEG", quality=90)
    sx, sy = WIDTH / width, SIDE / height
    return out.getvalue(), [(c, (b[0] * sx, b[1] * sy, b[2] * sx, b[3] * sy))
                            for c, b in boxes]


def val_photos(data_dir: pathlib.Path, count: int) -> list[Any]:
    images, coco, entries = shapes_data.load_split(data_dir, "val", count)
    out = []
    for image, entry in zip(images, entries):
        boxes = [(a["category_id"], (a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2],
                                     a["bbox"][1] + a["bbox"][3]))
                 for a in coco["annotations"] if a["image_id"] == entry["id"]]
        out.append(upscaled(image, boxes))
    return out


def iou(a: Any, b: Any) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def match(found: list[Any], truth: list[Any], threshold: float) -> list[tuple[int, int, float]]:
    """Greedy matching, best score first: (found index, truth index, IoU)."""
    pairs, used = [], set()
    for i in sorted(range(len(found)), key=lambda i: -found[i][1]):
        best, best_iou = None, threshold
        for j, t in enumerate(truth):
            if j in used or int(t[0]) != int(found[i][0]):
                continue
            overlap = iou(found[i][2:], t[1:5])
            if overlap >= best_iou:
                best, best_iou = j, overlap
        if best is not None:
            used.add(best)
            pairs.append((i, best, best_iou))
    return pairs


def compare(services: dict[str, ModelService], pool: PredictorPool, photos: list[Any],
            threshold: float) -> dict[str, Any]:
    """Both modes on the same photos: time, precision and recall, agreement."""
    answers: dict[str, list[list[Any]]] = {mode: [] for mode in services}
    seconds: dict[str, list[float]] = {mode: [] for mode in services}
    for encoded, _ in photos:
        body = json.dumps({"inputs": [{"name": "image", "shape": [1], "datatype": "BYTES",
                                       "data": [base64.b64encode(encoded).decode()]}]}).encode()
        for mode, service in services.items():
            start = time.perf_counter()
            result = pool.submit(service.infer_body, body).result()
            seconds[mode].append(time.perf_counter() - start)
            outputs = {o["name"]: o for o in json.loads(result.body)["outputs"]}
            rows = np.asarray(outputs["bbox"]["data"], np.float64).reshape(-1, 6)
            answers[mode].append(rows.tolist())
    report: dict[str, Any] = {"photo_mean_bytes": round(statistics.mean(len(p) for p, _ in photos))}
    for mode in services:
        tp = found = truths = 0
        for rows, (_, truth) in zip(answers[mode], photos):
            drawn = [r for r in rows if r[1] >= threshold]
            tp += len(match(drawn, [(c, *b) for c, b in truth], 0.5))
            found += len(drawn)
            truths += len(truth)
        ms = sorted(s * 1000 for s in seconds[mode])
        report[mode] = {
            "request_ms_median": round(statistics.median(ms), 1),
            "request_ms_p90": round(ms[int(0.9 * (len(ms) - 1))], 1),
            "precision_at_iou_0.5": round(tp / found, 3) if found else None,
            "recall_at_iou_0.5": round(tp / truths, 3) if truths else None,
            "drawn_detections": found,
        }
    for floor, name in ((threshold, "drawn"), (0.1, "score_at_least_0.1")):
        same, ious, diffs = 0, [], []
        for full_rows, reduced_rows in zip(answers["full"], answers["reduced"]):
            full = [r for r in full_rows if r[1] >= floor]
            reduced = [r for r in reduced_rows if r[1] >= floor]
            pairs = match(reduced, [(r[0], *r[2:]) for r in full], 0.0)
            ious += [p[2] for p in pairs]
            diffs += [abs(reduced[i][1] - full[j][1]) for i, j, _ in pairs]
            if len(full) == len(reduced) == len(pairs) and all(p[2] >= 0.9 for p in pairs):
                same += 1
        report[f"agreement_{name}"] = {
            "images_with_the_same_detections": f"{same}/{len(photos)}",
            "detections_full": sum(len([r for r in a if r[1] >= floor]) for a in answers["full"]),
            "detections_reduced": sum(len([r for r in a if r[1] >= floor])
                                      for a in answers["reduced"]),
            "matched_mean_iou": round(statistics.mean(ious), 4) if ious else None,
            "matched_min_iou": round(min(ious), 4) if ious else None,
            "matched_mean_score_difference": round(statistics.mean(diffs), 4) if diffs else None,
        }
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=pathlib.Path, required=True)
    parser.add_argument("--data-dir", type=pathlib.Path, default=None,
                        help="the example's dataset (its val split); default: rendered only")
    parser.add_argument("--images", type=int, default=40, help="photos of each kind")
    parser.add_argument("--out", type=pathlib.Path,
                        default=ROOT / "benchmarks" / "results" / "reduced_decode.json")
    args = parser.parse_args()
    load_before = os.getloadavg()
    model = load_model_dir(args.model_dir)
    pool = PredictorPool(model, 1, 1)
    services = {mode: ModelService(model, "m", "1", pool, ImageOptions(reduced_decode=reduced))
                for mode, reduced in (("full", False), ("reduced", True))}
    threshold = model.infer_cfg.draw_threshold
    rng = random.Random(2026)
    kinds = {"rendered": [photo(rng) for _ in range(args.images)]}
    if args.data_dir is not None:
        kinds["val"] = val_photos(args.data_dir, args.images)
    report: dict[str, Any] = {}
    for kind, photos in kinds.items():
        report[kind] = compare(services, pool, photos, threshold)
    pool.shutdown()
    report.update({
        "when": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
        "command": f"python benchmarks/reduced_decode.py --model-dir ... --images {args.images}",
        "model": {"name": model.record.get("name"), "version": model.record.get("version"),
                  "hyperparameters": model.record.get("hyperparameters"),
                  "draw_threshold": threshold},
        "photos": {"count_of_each_kind": args.images, "size": [WIDTH, SIDE],
                   "jpeg_quality": 90},
        "machine": {"cpus": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
                    "load_after": [round(x, 2) for x in os.getloadavg()],
                    "note": "2 cores shared with other jobs running at the same time"},
    })
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
