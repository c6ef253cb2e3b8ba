"""How wide is the paired gate's interval on the shapes example's val set sizes, and how fast?

Two synthetic detectors of the shapes example's quality (mAP@0.5 ~0.92, three
classes, 1-6 boxes per 128 px image; tests/fixtures/detections.py) that
differ like the demo's good push (+0.003 mAP@0.5 on 2,000 images): the
production one misses 0.5 % more boxes. Two scenarios: `fine-tune`, where
the candidate makes the same errors plus finds some more boxes (one seed),
and `retrain`, where its errors are its own (another seed) and shared only
through which images are hard: the harder and more common case.
For each val set size: the observed difference with its 95 % paired interval
(1,000 resamples), each model's own interval, the paired gate's verdict with
the example's gate (min 0.85, max_regression 0.01), and the time to match
the detections once and to run the resamples. Saves
benchmarks/results/paired_gate.json.

    python benchmarks/paired_gate.py [--sizes 100 200 500 1000] [--resamples 1000]
"""

import argparse
import json
import os
import pathlib
import platform
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from promotion.decision.coco_ap import average_precision, match_detections  # noqa: E402
from promotion.decision.gate import GateConfig, evaluate_paired_gate  # noqa: E402
from promotion.decision.paired import bootstrap_weights, paired_bootstrap  # noqa: E402
from tests.fixtures.detections import detect, make_gt  # noqa: E402

PRODUCTION = dict(recall=0.995, jitter=0.04, noise=0.1, confusion=0.005, hit_score=0.9,
                  hard_weight=0.25)
CANDIDATE = dict(PRODUCTION, recall=1.0)
GATE = GateConfig(metric="map50", min=0.85, max_regression=0.01)


def width(interval) -> float:
    return round(interval.high - interval.low, 4)


SCENARIOS = {"fine-tune": 7, "retrain": 8}
"""The candidate detector's seed; production's is 7."""


def run(scenario: str, images: int, resamples: int) -> dict:
    gt = make_gt(1234, images, per_image=6)
    cand = detect(gt, SCENARIOS[scenario], **CANDIDATE)
    prod = detect(gt, 7, **PRODUCTION)
    start = time.perf_counter()
    paired = paired_bootstrap(gt, cand, prod, resamples=resamples, seed=0)
    total = time.perf_counter() - start
    # the two parts, timed apart: matching once, then the resamples for both models
    start = time.perf_counter()
    mc, mp = match_detections(gt, cand), match_detections(gt, prod)
    matching = time.perf_counter() - start
    weights = bootstrap_weights(images, resamples, 0)
    start = time.perf_counter()
    average_precision(mc, weights)
    average_precision(mp, weights)
    resampling = time.perf_counter() - start
    gate = evaluate_paired_gate(GATE, paired)
    return {
        "scenario": scenario,
        "images": images,
        "annotations": len(gt["annotations"]),
        "detections": {"candidate": len(cand), "production": len(prod)},
        "candidate_map50": round(paired.candidate["map50"].estimate, 4),
        "production_map50": round(paired.production["map50"].estimate, 4),
        "difference": {k: v.model_dump() for k, v in paired.difference.items()},
        "paired_width": {k: width(v) for k, v in paired.difference.items()},
        "candidate_alone_width": {k: width(v) for k, v in paired.candidate.items()},
        "classes": {c.name: c.difference.model_dump() for c in paired.classes},
        "gate": {"passed": gate.passed, "verdict": gate.verdict, "reason": gate.reason},
        "seconds": {"total": round(total, 2), "matching": round(matching, 2),
                    "resampling": round(resampling, 2)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 200, 500, 1000])
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--population", type=int, default=2000,
                        help="images on which the 'true' difference is measured")
    args = parser.parse_args()
    gt = make_gt(99, args.population, per_image=6)
    ones = np.ones((1, args.population), dtype=np.int64)
    truth = {}
    for name, seed, knobs in [("production", 7, PRODUCTION)] + [
            (scenario, seed, CANDIDATE) for scenario, seed in SCENARIOS.items()]:
        ap = average_precision(match_detections(gt, detect(gt, seed, **knobs)), ones)
        truth[name] = float(np.nanmean(ap[0, 0]))
    load_before = os.getloadavg()[0]
    rows = []
    for scenario in SCENARIOS:
        for n in args.sizes:
            rows.append(run(scenario, n, args.resamples))
            r = rows[-1]
            print(f"{scenario:9s} {n:5d} images: map50 {r['gate']['verdict']}"
                  f" width {r['paired_width']['map50']:.4f} (candidate alone "
                  f"{r['candidate_alone_width']['map50']:.4f}); gate "
                  f"{'PASS' if r['gate']['passed'] else 'FAIL'}; {r['seconds']}")
    result = {
        "benchmark": "paired_gate",
        "machine": {"python": platform.python_version(), "cpu": platform.machine(),
                    "cores": os.cpu_count(),
                    "load_average_before_after": [round(load_before, 2),
                                                  round(os.getloadavg()[0], 2)]},
        "resamples": args.resamples,
        "confidence": 0.95,
        "gate": GATE.model_dump(),
        "population": {"images": args.population,
                       "map50": {k: round(v, 4) for k, v in truth.items()},
                       "difference_map50": {
                           k: round(truth[k] - truth["production"], 4) for k in SCENARIOS}},
        "sizes": rows,
    }
    out = ROOT / "benchmarks" / "results" / "paired_gate.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"population differences {result['population']['difference_map50']}; wrote {out}")


if __name__ == "__main__":
    main()
