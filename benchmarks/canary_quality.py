"""The canary's model-quality checks under simulated traffic, through the real decide().

    python benchmarks/canary_quality.py [--runs 1000] [--seed 1]

Each simulated window draws Poisson requests for both versions (split by the
canary's weight) and, per answered image, whether it is *poor* for each
default quality check (no confident detection; best score <= 0.5) at the
version's own rates; the window becomes `Observations` with the histograms
the model server exports, and `promotion.decision.analysis.decide` (the controller's
own function, default policy apart from the interval and min_requests of the
demo) decides. No errors and no latency difference: only the quality checks
can roll a canary back here.

Scenarios:
- `healthy`: both versions answer alike (8 % of images without a detection,
  15 % with a best score <= 0.5): false rollbacks over the runs;
- `drift`: a retrain 1.5x as often poor (12 % / 22.5 %): harmless by the
  `no_detections` margins (2x and 3 points). Its histograms have no image with
  exactly one box, so here 1.5x as often empty is also 1.5x at "at most one
  box", beyond the answers' distribution's ratio margin (1.25x): the distribution
  rolls it back when the step's observed difference passes its 5 points (its
  difference margin is a filter on what the ratio test found, not a second
  test), about one run in five, after thousands of canary requests;
- `held`: `healthy`, but the canary is held at 10 % for an hour (min_requests
  out of reach), looked at every window: the anytime-valid claim;
- `worse`: a retrain 3x as often poor (24 % / 45 %): beyond the margins, so
  the power of the checks on a real but partial loss: rollbacks, and canary
  requests until them;
- `partial`: the YOLOv3 example's skew as measured (11 % of images without
  a detection vs 1.5 %): rollbacks;
- `skew`: the canary finds nothing (100 % / 100 %; the shapes example's
  skew finds nothing on 87.5 %): canary requests until the rollback.
- class mixes (detections by class, `promotion/decision/class_mix.py`; 2.5 per found
  image): every scenario above draws them from the shapes example's mix
  (33/31/36 %), the same for both versions except `drift`, whose retrain also
  moves the shares by 2 points (harmless: false rollbacks);
  `skewed-healthy` and `skewed-drift` (60/30/10, the canary 57/32/11):
  false rollbacks on a skewed mix; `skewed-rotated` (label map shifted by
  one: 10/60/30) and `skewed-swapped` (30/60/10): the class-mix check's power;
  `shapes-rotated` and `shapes-swapped`: the same on the nearly balanced
  shapes mix, where a rotation moves each share by at most 5 points.
- paired answers (`promotion/decision/answers.py`; `--sections answers`): a probe set
  of 16 or 32 images drawn from the shapes mix, with the stable's confident
  boxes per image as the full example model finds them (2.3) or as the
  suite's small model does (0.56: 18 boxes on 32 val images, measured by
  tests/local/test_platform_e2e.py); the canary's answers are the stable's moved
  by a few pixels, 10 % of boxes found by one version only, and a share of
  matched boxes renamed: 5 %, 10 % and 15 % (harmless retrains, below the
  20 % margin), every box (`answers-rotated`) or the first two classes
  swapped (`answers-swapped`: about 64 % of boxes on this balanced mix).
  Each run makes the probe, matches it with the check's own code and hands
  it to `decide()` with a healthy first window: false rollbacks and power.
Each scenario runs under both pass rules of a step, in the same run:
`shown` (the default: the canary's upper confidence bound within the
margins, `quality.pass_confidence`) and `count` (`pass_confidence: null`:
`min_answers` answers and no rejection), with the seconds to promotion.
The stated rate is the policy's one `alpha` (1 %), of which the quality checks, the
answers' distribution and the class mix spend their shares (`stats.ALPHA_SHARES`);
the report gives each observed rate with a 95 % Wilson interval. The class counts
are per image (images naming each class), as the server exports them since issue
43. The canary's guarantees on the data it really gets (exact counts, heavy-tailed
latency, crowd images, a score shift, a rare swap) are benchmarks/canary_guarantees.py's.
Results: benchmarks/results/canary_quality.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import itertools
import json
import math
import pathlib
import platform
import sys
import time
from typing import Any

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from promotion.decision import answers, stats  # noqa: E402
from promotion.decision.analysis import decide  # noqa: E402
from promotion.decision.answers import Box  # noqa: E402
from promotion.decision.observations import (  # noqa: E402
    Observations,
    PairedAnswers,  # noqa: E402
    VersionWindow,
)
from promotion.decision.policy import CanaryPolicy, QualitySpec  # noqa: E402
from promotion.decision.state import start_canary  # noqa: E402

T0 = dt.datetime(2026, 11, 25, tzinfo=dt.timezone.utc)


#: Class mixes (detections by class): the shapes example's, measured on its stable
#: (circle/square/triangle 2010/1887/2176), and a skewed one like most real data sets.
SHAPES = (0.331, 0.311, 0.358)
SKEWED = (0.6, 0.3, 0.1)
DETECTIONS_PER_IMAGE = 2.5


def rotated(mix: tuple[float, ...]) -> tuple[float, ...]:
    """A label map shifted by one: each class's detections named as the next class."""
    return mix[-1:] + mix[:-1]


def swapped(mix: tuple[float, ...]) -> tuple[float, ...]:
    """The first two labels swapped."""
    return (mix[1], mix[0], *mix[2:])


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    stable_poor: tuple[float, float]  # (no detection, best score <= 0.5)
    canary_poor: tuple[float, float]
    horizon_s: float
    min_requests: int = 100
    stable_mix: tuple[float, ...] = SHAPES
    canary_mix: tuple[float, ...] = SHAPES


SCENARIOS = (
    Scenario("healthy", (0.08, 0.15), (0.08, 0.15), 1800),
    # a retrain: 1.5x as often poor, and its class shares moved by 2 points
    Scenario("drift", (0.08, 0.15), (0.12, 0.225), 1800, canary_mix=(0.351, 0.301, 0.348)),
    Scenario("held", (0.08, 0.15), (0.08, 0.15), 3600, min_requests=10**9),
    Scenario("worse", (0.08, 0.15), (0.24, 0.45), 1800),
    Scenario("partial", (0.015, 0.015), (0.11, 0.11), 1800),
    Scenario("skew", (0.08, 0.15), (1.0, 1.0), 900),
    # the class-mix check alone (answers otherwise alike)
    Scenario("skewed-healthy", (0.08, 0.15), (0.08, 0.15), 1800, stable_mix=SKEWED,
             canary_mix=SKEWED),
    Scenario("skewed-drift", (0.08, 0.15), (0.08, 0.15), 1800, stable_mix=SKEWED,
             canary_mix=(0.57, 0.32, 0.11)),
    Scenario("skewed-rotated", (0.08, 0.15), (0.08, 0.15), 1800, stable_mix=SKEWED,
             canary_mix=rotated(SKEWED)),
    Scenario("skewed-swapped", (0.08, 0.15), (0.08, 0.15), 1800, stable_mix=SKEWED,
             canary_mix=swapped(SKEWED)),
    Scenario("shapes-rotated", (0.08, 0.15), (0.08, 0.15), 1800, canary_mix=rotated(SHAPES)),
    Scenario("shapes-swapped", (0.08, 0.15), (0.08, 0.15), 1800, canary_mix=swapped(SHAPES)),
)


def _window(rng: np.random.Generator, n: int, poor: tuple[float, float],
            mix: tuple[float, ...]) -> VersionWindow:
    # An image without a detection also has its best score <= 0.5: the low-confidence
    # images include the empty ones (the two were once drawn apart, which cannot happen).
    empty = int(rng.binomial(n, poor[0])) if n else 0
    more = max(0.0, (poor[1] - poor[0]) / (1.0 - poor[0])) if poor[0] < 1 else 0.0
    low = empty + (int(rng.binomial(n - empty, more)) if n - empty else 0)
    latency = {0.01: 0.0, 0.05: float(n), math.inf: float(n)}
    # Images naming each class (the server's model_class_images_total): a found image holds
    # Poisson(2.5) objects, so it names class c with probability 1 - exp(-2.5 x share).
    found = n - empty
    named = [int(rng.binomial(found, 1.0 - math.exp(-DETECTIONS_PER_IMAGE * m))) if found else 0
             for m in mix]
    return VersionWindow(requests=n, errors=0, latency=latency, quality={
        "detections_per_image": {0.0: float(empty), 1.0: float(empty), math.inf: float(n)},
        "top_score": {0.5: float(low), 1.0: float(n), math.inf: float(n)},
    }, classes={f"class{i}": float(c) for i, c in enumerate(named)} | {"other": 0.0})


#: quality.pass_confidence of each pass rule: the policy's default, and none
PASS_RULES = {"shown": QualitySpec().pass_confidence, "count": None}


def rollout(rng: np.random.Generator, scenario: Scenario, rate: float,
            interval: float, pass_confidence: float | None) -> dict[str, Any]:
    policy = CanaryPolicy(interval=interval, min_requests=scenario.min_requests,
                          quality=QualitySpec(pass_confidence=pass_confidence))
    state = start_canary("m", "v1", "v2", policy.steps[0], T0)
    canary_requests = 0
    t = 0.0
    while t < scenario.horizon_s:
        t += interval
        total = int(rng.poisson(rate * interval))
        n_c = int(rng.binomial(total, state.weight / 100))
        canary_requests += n_c
        obs = Observations(canary=_window(rng, n_c, scenario.canary_poor, scenario.canary_mix),
                           stable=_window(rng, total - n_c, scenario.stable_poor,
                                          scenario.stable_mix),
                           window_seconds=interval)
        decision = decide(policy, state, obs, T0 + dt.timedelta(seconds=t))
        state = decision.state
        if decision.kind in ("rollback", "promote"):
            failed = [c.name for c in decision.evidence.checks if c.verdict == "fail"]
            return {"outcome": decision.kind, "seconds": t, "canary_requests": canary_requests,
                    "failed": failed}
    return {"outcome": "open", "seconds": t, "canary_requests": canary_requests, "failed": []}


@dataclasses.dataclass(frozen=True)
class AnswersScenario:
    name: str
    renamed: float | None  # share of matched boxes a retrain renames; None: a label map
    names: tuple[int, ...] = (0, 1, 2)  # the canary's class for each stable class


ANSWERS_SCENARIOS = (
    AnswersScenario("answers-drift-5%", 0.05),
    AnswersScenario("answers-drift-10%", 0.10),
    AnswersScenario("answers-drift-15%", 0.15),
    AnswersScenario("answers-rotated", None, (1, 2, 0)),
    AnswersScenario("answers-swapped", None, (1, 0, 2)),
)
#: Confident boxes per probe image: the full example model, the suite's small one.
BOX_DENSITIES = {"full-model": 2.3, "small-model": 18 / 32}
PROBE_SIZES = (16, 32)
ONE_SIDED = 0.10  # boxes one version finds and the other does not


def _probe(rng: np.random.Generator, images: int, density: float,
           scenario: AnswersScenario) -> PairedAnswers:
    check = CanaryPolicy().quality.answers
    assert check is not None
    stable, canary = [], []
    for _ in range(images):
        boxes_s, boxes_c = [], []
        for j in range(int(rng.poisson(density))):
            cls = int(rng.choice(3, p=SHAPES))
            x, y = 35.0 * (j % 3), 35.0 * (j // 3)
            box = Box(f"class{cls}", float(rng.uniform(0.55, 0.99)), x, y, x + 30, y + 30)
            if rng.random() >= ONE_SIDED / 2:
                boxes_s.append(box)
            if rng.random() < ONE_SIDED / 2:
                continue
            dx, dy = rng.uniform(-3, 3, 2)
            if scenario.renamed is None:
                new = scenario.names[cls]
            else:
                new = (cls + 1) % 3 if rng.random() < scenario.renamed else cls
            boxes_c.append(Box(f"class{new}", box.score, box.x1 + dx, box.y1 + dy,
                               box.x2 + dx, box.y2 + dy))
        stable.append(boxes_s)
        canary.append(boxes_c)
    return answers.compare(stable, canary, check)


def answers_rows(rng: np.random.Generator, runs: int) -> list[dict[str, Any]]:
    """The paired answers check through decide(): one healthy first window per run."""
    policy = CanaryPolicy(min_requests=100)
    state = start_canary("m", "v1", "v2", policy.steps[0], T0)
    healthy = _window(rng, 40, (0.08, 0.15), SHAPES)
    rows = []
    for scenario, (density_name, density), images in itertools.product(
            ANSWERS_SCENARIOS, BOX_DENSITIES.items(), PROBE_SIZES):
        rolled, skipped, matched = 0, 0, []
        for _ in range(runs):
            paired = _probe(rng, images, density, scenario)
            obs = Observations(canary=healthy, stable=_window(rng, 360, (0.08, 0.15), SHAPES),
                               window_seconds=10.0, answers=paired)
            decision = decide(policy, state, obs, T0 + dt.timedelta(seconds=10))
            check = decision.evidence.check("answers")
            rolled += decision.kind == "rollback" and check is not None and \
                check.verdict == "fail"
            skipped += check is None or check.verdict == "skipped"
            matched.append(paired.matched)
        low, high = stats.wilson_interval(rolled, runs, 1.96)
        row = {"scenario": scenario.name, "boxes": density_name, "boxes_per_image": density,
               "probe_images": images, "runs": runs, "rolled_back": rolled,
               "rollback_rate": rolled / runs, "rollback_rate_95ci": [low, high],
               "no_verdict": skipped, "matched_boxes_p50": float(np.percentile(matched, 50))}
        rows.append(row)
        print(f"{scenario.name:18s} {density_name:11s} {images:2d} images  runs {runs}  "
              f"rolled back {rolled:5d} ({rolled / runs:.2%}, 95% CI {low:.2%}..{high:.2%})  "
              f"no verdict {skipped:4d}  matched boxes p50 {row['matched_boxes_p50']:.0f}",
              flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=40.0, help="requests/s in all (the demo's)")
    parser.add_argument("--interval", type=float, default=10.0, help="analysis interval, s")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/canary_quality.json"))
    parser.add_argument("--sections", default="rollouts,answers",
                        help="rollouts (the quality and class-mix checks over whole rollouts), "
                             "answers (the paired answers check); a section left out keeps "
                             "its rows from the existing --out file")
    args = parser.parse_args(argv)
    sections = set(args.sections.split(","))
    rng = np.random.default_rng(args.seed)
    started = time.monotonic()
    out = pathlib.Path(args.out)
    previous = json.loads(out.read_text()) if out.is_file() else {}
    rows = [] if "rollouts" in sections else previous.get("rows", [])
    for scenario, (rule, confidence) in itertools.product(
            SCENARIOS if "rollouts" in sections else (), PASS_RULES.items()):
        runs = args.runs if scenario.name != "held" else max(1, args.runs // 4)
        results = [rollout(rng, scenario, args.rate, args.interval, confidence)
                   for _ in range(runs)]
        rollbacks = [r for r in results if r["outcome"] == "rollback"]
        promotions = [r for r in results if r["outcome"] == "promote"]
        by_quality = [r for r in rollbacks if any(f.startswith("quality_") for f in r["failed"])]
        by_mix = [r for r in rollbacks if "quality_class_mix" in r["failed"]]
        low, high = stats.wilson_interval(len(rollbacks), runs, 1.96)
        row: dict[str, Any] = {
            "scenario": scenario.name, "pass_rule": rule, "runs": runs,
            "stable_poor": scenario.stable_poor, "canary_poor": scenario.canary_poor,
            "stable_mix": scenario.stable_mix, "canary_mix": scenario.canary_mix,
            "rolled_back": len(rollbacks), "rolled_back_by_quality": len(by_quality),
            "rolled_back_by_class_mix": len(by_mix),
            "rollback_rate": len(rollbacks) / runs, "rollback_rate_95ci": [low, high],
            "promoted": len(promotions),
            "open": sum(r["outcome"] == "open" for r in results),
        }
        if rollbacks:
            reqs = np.array([r["canary_requests"] for r in rollbacks])
            secs = np.array([r["seconds"] for r in rollbacks])
            row.update({"canary_requests_to_rollback_p50": float(np.percentile(reqs, 50)),
                        "canary_requests_to_rollback_p90": float(np.percentile(reqs, 90)),
                        "seconds_to_rollback_p90": float(np.percentile(secs, 90))})
        if promotions:
            secs = np.array([r["seconds"] for r in promotions])
            row.update({"seconds_to_promotion_p50": float(np.percentile(secs, 50)),
                        "seconds_to_promotion_p90": float(np.percentile(secs, 90))})
        rows.append(row)
        print(f"{scenario.name:14s} {rule:5s} runs {runs:5d}  rolled back {len(rollbacks):5d} "
              f"({row['rollback_rate']:.2%}, 95% CI {low:.2%}..{high:.2%}; class mix "
              f"{len(by_mix)})  promoted "
              f"{row['promoted']:5d}  open {row['open']:4d}"
              + (f"  canary requests to rollback p50 {row['canary_requests_to_rollback_p50']:.0f}"
                 f" p90 {row['canary_requests_to_rollback_p90']:.0f}" if rollbacks else "")
              + (f"  s to promotion p50 {row['seconds_to_promotion_p50']:.0f} p90 "
                 f"{row['seconds_to_promotion_p90']:.0f}" if promotions else ""),
              flush=True)
    paired = answers_rows(rng, args.runs) if "answers" in sections else \
        previous.get("answers_rows", [])
    policy = CanaryPolicy()
    doc = {
        "benchmark": "canary_quality",
        "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpu": platform.machine()},
        "seed": args.seed, "rate": args.rate, "interval": args.interval,
        "quality_policy": policy.quality.model_dump(mode="json"),
        "stated_false_rollback_rate": policy.alpha,
        "stated_quality_false_rollback_rate": policy.alpha * (
            stats.ALPHA_SHARES["quality"] + stats.ALPHA_SHARES["distribution"]),
        "stated_class_mix_false_rollback_rate": policy.alpha * stats.ALPHA_SHARES["class_mix"],
        "rows": rows, "answers_rows": paired,
        "sections_run": sorted(sections), "seconds": round(time.monotonic() - started, 1),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
