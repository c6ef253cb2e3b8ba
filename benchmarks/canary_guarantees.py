"""What the canary promises, measured on the data it really gets, through the real decide().

    nice python benchmarks/canary_guarantees.py [--runs 400] [--seed 1] [--only NAME,...]

Every rollout is simulated window by window and decided by
`promotion.decision.analysis.decide` with the default policy (a 60 s window, 200
canary requests a step) unless a case says otherwise; its state goes from window
to window as the controller carries it. Answers are simulated per image: a
Poisson number of objects (2.6 an image) of classes drawn from the case's mix,
each found with a logit ~ N(1.75, 1.8) (confident when its score is >= 0.5: 2.17
confident boxes an image), plus low-scoring background boxes; the server's
histograms (confident detections per image, best score) and per-class image
counts are filled as `serving/metrics.py` fills them, with its own buckets
(`serving/quality.py`). Latency goes into the router's buckets
(`local/platform/router_latency.lua`). Traffic is 40 requests/s in all (the
fault drills' load), split by the canary's weight.

Healthy canaries held an hour (`held_hour.*`: both versions identical, the
canary kept at 10 % because `min_requests` is out of reach, looked at every
window); a false rollback is any rollback. The stated total is the policy's one
`alpha`:

- `extrapolated_30s`: a 30 s scrape and a 60 s window, two samples per window.
  Every counter of both versions (requests, errors, latency buckets, the
  answers' buckets, images per class) is simulated as Prometheus scrapes it
  and turned into the window's counts by the metric source's own arithmetic
  (`promotion.metrics.counters.increase` on the last samples at the window's
  ends). `extrapolated_30s_increase` shows what `increase()` gave instead:
  twice the difference of the two samples inside the window (its
  extrapolation at this spacing: tests/promotion/test_promotion_metrics_exact.py
  pins it against a real Prometheus);
- `lognormal_sigma1`: latency lognormal, median 50 ms, sigma 1.0, in the demo's 10 s
  windows (400 requests each: a bound taken from the window's own stable sample was
  fooled there; at 60 s windows neither bound fired in 300 held hours); the latency
  cases measure no answers (the other cases judge those);
- `slow_tail`: sigma 0.5, and 2 % of requests 5x slower (GC pauses, cold caches), 10 s;
- `crowd_15pct`: a skewed class mix (60/30/10) with 15 % crowd images (15
  objects of one class).

Detection (`detect.*`; rolled back within the horizon, and canary requests to
the rollback):

- `score_shift`: every canary score one logit lower (boxes right; 2.17 -> 1.72
  confident boxes per image), 1 h;
- `rare_swap`: ten classes (a 5 % and a 3 % class among them) and the canary
  naming those two swapped, 1 h, with the paired answers probe of the stable's
  32 probe images drawn at random and stratified by class from a simulated val
  set (`workflows/probe_set.stratified_sample`), once per step as the controller
  probes;
- `latency_1p5x`, `latency_2x`: every canary request 1.5x (the margin) or 2x slower;
- `blind_15pct`: the canary answers 15 % of images with nothing confident (11 % of
  images without a confident box become 25 %: beyond both margins of `no_detections`);
- `class_vanished`: ten classes, the canary names its 5 % class as another one;
- `errors_5pct`: 5 % errors against stable's 0.1 %, 100 requests/s, a 5 s
  interval (benchmarks/canary.py's `bad` case);
- `label_swap`: the two commonest of a 60/30/10 mix swapped, 40 requests/s, the
  demo's 10 s interval and 100 requests a step (benchmarks/canary_quality.py's
  `skewed-swapped`), with the paired answers probe as by default;
  `label_swap_class_mix` without it: the class mix alone.

Promotion (`promote.*`): healthy canaries and a harmless retrain (class shares
moved by 2 points, scores a fifth of a logit lower) at the default settings and
at the demo's (10 s, 100 requests a step): promoted, and the seconds it took.

`baseline` holds the same cases run by this script on the code before this change
(`--baseline FILE`, that run's JSON). Each rollout's requests per window come from a
stream of their own, seeded by (seed, case, rollout), so both codes see the same traffic
while they decide alike: delays compare window by window (`windows_to_rollback`, the
whole distribution) rather than through the noise of Poisson request counts.
Results: benchmarks/results/canary_guarantees.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import inspect
import json
import math
import pathlib
import platform
import re
import sys
import time
import zlib
from typing import Any, Callable

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from promotion.decision import class_mix, stats  # noqa: E402
from promotion.decision.analysis import decide  # noqa: E402
from promotion.decision.observations import Observations, VersionWindow  # noqa: E402
from promotion.decision.policy import CanaryPolicy  # noqa: E402
from promotion.decision.state import start_canary  # noqa: E402
from serving.quality import DETECTION_BUCKETS, SCORE_BUCKETS  # noqa: E402

try:  # absent before exact counts (a baseline run of this file on older code)
    from promotion.metrics.counters import increase as counter_increase  # noqa: E402
except ImportError:  # pragma: no cover
    counter_increase = None

T0 = dt.datetime(2026, 11, 27, tzinfo=dt.timezone.utc)
PER_IMAGE_CLASSES = "canary_images" in inspect.signature(class_mix.update).parameters


def _router_bounds() -> tuple[float, ...]:
    text = (ROOT / "local/platform/router_latency.lua").read_text()
    body = re.search(r"local BOUNDS = \{([^}]*)\}", text)
    assert body is not None, "router_latency.lua: no BOUNDS"
    return tuple(float(x) for x in body.group(1).replace("\n", " ").split(",") if x.strip())


LATENCY_BOUNDS = _router_bounds()


@dataclasses.dataclass(frozen=True)
class Answers:
    """How one version answers images."""

    mix: tuple[float, ...] = (0.331, 0.311, 0.358)
    objects: float = 2.6
    logit_mean: float = 1.75
    logit_sd: float = 1.8
    shift: float = 0.0  # added to every logit
    names: tuple[int, ...] | None = None  # the class each true class is named as
    crowd: float = 0.0  # share of crowd images
    crowd_size: int = 15
    background: float = 3.0  # low-scoring boxes an image
    blind: float = 0.0  # share of images answered with nothing confident


@dataclasses.dataclass(frozen=True)
class Version:
    answers: Answers = Answers()
    errors: float = 0.001
    latency_median: float = 0.05
    latency_sigma: float = 0.3
    slow_share: float = 0.0  # requests 5x slower
    latency_factor: float = 1.0  # every request this much slower


def _cumulative(values: np.ndarray, bounds: tuple[float, ...]) -> dict[float, float]:
    counts = np.searchsorted(np.sort(values), np.asarray(bounds, dtype=float), side="right")
    out = {float(b): float(c) for b, c in zip(bounds, counts)}
    out[math.inf] = float(len(values))
    return out


def draw(rng: np.random.Generator, n: int, v: Version, answers: bool = True) -> dict[str, Any]:
    """One version's counts for n requests (one image each), as plain dicts (without the
    answers' when `answers` is False)."""
    if not answers:
        latency = rng.lognormal(math.log(v.latency_median), v.latency_sigma, n)
        latency = np.where(rng.random(n) < v.slow_share, latency * 5, latency) * \
            v.latency_factor
        return {"requests": n, "errors": int(rng.binomial(n, v.errors)) if n else 0,
                "latency": _cumulative(latency, LATENCY_BOUNDS)}
    a = v.answers
    k = len(a.mix)
    crowd = rng.random(n) < a.crowd
    per_image = np.where(crowd, a.crowd_size, rng.poisson(a.objects, n))
    image = np.repeat(np.arange(n), per_image)
    crowd_class = rng.choice(k, size=n, p=a.mix)
    cls = np.where(crowd[image], crowd_class[image], rng.choice(k, size=len(image), p=a.mix))
    logit = rng.normal(a.logit_mean, a.logit_sd, len(image)) + a.shift
    score = 1.0 / (1.0 + np.exp(-logit))
    if a.blind:  # the model goes blind on some images: every score there far below 0.5
        score = np.where((rng.random(n) < a.blind)[image], score * 0.2, score)
    confident = score >= 0.5
    named = cls if a.names is None else np.asarray(a.names)[cls]
    detections = np.bincount(image[confident], minlength=n)
    top = np.zeros(n)
    np.maximum.at(top, image, score)
    background = rng.poisson(a.background, n)  # the best of b uniform scores in 0.02..0.3
    best = 0.02 + 0.28 * rng.random(n) ** (1.0 / np.maximum(background, 1))
    top = np.maximum(top, np.where(background > 0, best, 0.0))
    pairs = np.unique(image[confident] * k + named[confident])
    images_per_class = np.bincount(pairs % k, minlength=k)
    boxes_per_class = np.bincount(named[confident], minlength=k)
    per_class = images_per_class if PER_IMAGE_CLASSES else boxes_per_class
    latency = rng.lognormal(math.log(v.latency_median), v.latency_sigma, n)
    latency = np.where(rng.random(n) < v.slow_share, latency * 5, latency) * v.latency_factor
    return {"requests": n, "errors": int(rng.binomial(n, v.errors)) if n else 0,
            "latency": _cumulative(latency, LATENCY_BOUNDS),
            "detections_per_image": _cumulative(detections.astype(float), DETECTION_BUCKETS),
            "top_score": _cumulative(top, SCORE_BUCKETS),
            "classes": {f"class{i}": float(c) for i, c in enumerate(per_class)}}


def _window(counts: dict[str, Any], answers: bool = True) -> VersionWindow:
    if not answers:
        return VersionWindow(requests=int(counts["requests"]), errors=int(counts["errors"]),
                             latency=counts["latency"])
    return VersionWindow(requests=int(counts["requests"]), errors=int(counts["errors"]),
                         latency=counts["latency"],
                         quality={"detections_per_image": counts["detections_per_image"],
                                  "top_score": counts["top_score"]},
                         classes=counts["classes"])


def _combine(parts: list[dict[str, Any]], how: Callable[[list[float]], float]) -> dict[str, Any]:
    """Counts of consecutive scrape intervals into one window's, key by key."""
    out: dict[str, Any] = {}
    for key, first in parts[0].items():
        if isinstance(first, dict):
            out[key] = {b: how([p[key][b] for p in parts]) for b in first}
        else:
            out[key] = how([p[key] for p in parts])
    return out


def exact_window(parts: list[dict[str, Any]], base: dict[str, Any]) -> dict[str, Any]:
    """The metric source's reading of a window made of `parts` (scrape intervals): each
    counter's cumulative value at the window's end minus at its start, through
    `counters.increase` (the source's own arithmetic); `base` is updated in place to the
    running totals."""
    def diff(key: str, bucket: Any = None) -> float:
        def value(d: dict[str, Any]) -> float:
            return float(d[key] if bucket is None else d[key][bucket])
        before = base.get((key, bucket), 0.0)
        running, samples = before, []
        for part in parts:
            running += value(part)
            samples.append(running)
        base[(key, bucket)] = running
        assert counter_increase is not None
        return counter_increase(before, samples)

    out: dict[str, Any] = {}
    for key, first in parts[0].items():
        out[key] = {b: diff(key, b) for b in first} if isinstance(first, dict) else diff(key)
    return out


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    canary: Version
    stable: Version
    horizon: float = 3600.0
    interval: float = 60.0
    rate: float = 40.0
    min_requests: int = 200
    held: bool = False  # never steps: min_requests out of reach
    scrape: float | None = None  # counts read from scrapes this far apart
    reading: str = "exact"  # exact | increase (what increase() gave, for contrast)
    probe: bool = False  # the paired answers probe, once per step
    answers: bool = True  # False: no answers measured (a latency case: the checks of the
    # answers are skipped, and the case runs in a fifth of the time)


def _probe(rng: np.random.Generator, case: Case, images: int = 32, val: int = 500) -> Any:
    """The stable's probe set (drawn at random, stratified by class, from a simulated val
    set) answered by both versions, compared by the check's own code."""
    from promotion.decision import answers as answers_check
    from promotion.decision.answers import Box
    try:
        from workflows.probe_set import stratified_sample
    except ImportError:  # older code shipped the first images by file name
        def stratified_sample(classes: Any, k: int, rng: Any) -> list[int]:
            return list(range(min(k, len(classes))))

    check = CanaryPolicy().quality.answers
    assert check is not None
    a_s = case.stable.answers
    k = len(a_s.mix)
    truth = [[(int(rng.choice(k, p=a_s.mix)), float(rng.normal(a_s.logit_mean, a_s.logit_sd)))
              for _ in range(int(rng.poisson(a_s.objects)))] for _ in range(val)]
    chosen = stratified_sample([{f"class{c}" for c, _ in objs} for objs in truth], images, rng)

    def answer(a: Answers) -> list[list[Box]]:
        out = []
        for i in chosen:
            boxes = []
            for j, (cls, logit) in enumerate(truth[i]):
                name = cls if a.names is None else a.names[cls]
                x, y = 35.0 * (j % 8), 35.0 * (j // 8)
                boxes.append(Box(f"class{name}", 1.0 / (1.0 + math.exp(-(logit + a.shift))),
                                 x, y, x + 30, y + 30))
            out.append(boxes)
        return out

    return answers_check.compare(answer(a_s), answer(case.canary.answers), check)


def rollout(rng: np.random.Generator, case: Case,
            traffic: np.random.Generator) -> dict[str, Any]:
    """One rollout to its end or the horizon. `traffic` draws the requests of each window
    (its own stream, so that two versions of the code see the same traffic as long as
    they decide alike); the answers, errors and latencies come from `rng`."""
    policy = CanaryPolicy(interval=case.interval,
                          min_requests=10**9 if case.held else case.min_requests)
    state = start_canary("m", "v1", "v2", policy.steps[0], T0)
    t = 0.0
    canary_requests = 0
    base: dict[str, dict[Any, float]] = {"canary": {}, "stable": {}}
    probed = None
    decisions = 0
    while t < case.horizon:
        t += case.interval
        weight = state.weight / 100
        if case.scrape:  # (draws of the answers are skipped when the case measures none)
            parts = int(round(case.interval / case.scrape))
            windows = {}
            for name, version in (("canary", case.canary), ("stable", case.stable)):
                draws = []
                for _ in range(parts):
                    total = int(traffic.poisson(case.rate * case.scrape))
                    n = int(traffic.binomial(total, weight)) if name == "canary" else \
                        int(traffic.binomial(total, 1 - weight))
                    draws.append(draw(rng, n, version, case.answers))
                if case.reading == "increase":  # two samples inside: the last interval x2
                    windows[name] = _combine(draws[-1:], lambda v: float(round(2 * v[0])))
                else:
                    windows[name] = exact_window(draws, base[name])
            n_c = int(windows["canary"]["requests"])
            canary, stable = windows["canary"], windows["stable"]
        else:
            total = int(traffic.poisson(case.rate * case.interval))
            n_c = int(traffic.binomial(total, weight))
            canary = draw(rng, n_c, case.canary, case.answers)
            stable = draw(rng, total - n_c, case.stable, case.answers)
        canary_requests += n_c
        if case.probe and (probed is None or probed[0] != state.weight):
            probed = (state.weight, _probe(rng, case))
        obs = Observations(canary=_window(canary, case.answers),
                           stable=_window(stable, case.answers),
                           window_seconds=case.interval,
                           answers=probed[1] if case.probe and probed else None)
        decision = decide(policy, state, obs, T0 + dt.timedelta(seconds=t))
        decisions += 1
        state = decision.state
        if decision.kind in ("rollback", "promote"):
            failed = [c.name for c in decision.evidence.checks if c.verdict == "fail"]
            return {"outcome": decision.kind, "seconds": t, "canary_requests": canary_requests,
                    "decisions": decisions, "failed": failed}
    return {"outcome": "open", "seconds": t, "canary_requests": canary_requests,
            "decisions": decisions, "failed": []}


IDENTICAL = Version()
SKEWED = (0.6, 0.3, 0.1)
TEN = (0.05, 0.03, 0.14, 0.13, 0.12, 0.11, 0.11, 0.11, 0.10, 0.10)

CASES = {
    "held_hour.extrapolated_30s": Case("extrapolated_30s", IDENTICAL, IDENTICAL, held=True,
                                       scrape=30.0),
    "held_hour.extrapolated_30s_increase": Case("extrapolated_30s_increase", IDENTICAL,
                                                IDENTICAL, held=True, scrape=30.0,
                                                reading="increase"),
    # the demo's 10 s windows: 400 requests each, where a bound from the window's own
    # stable sample was fooled (at 60 s neither bound fired in 300 held hours)
    "held_hour.lognormal_sigma1": Case("lognormal_sigma1", Version(latency_sigma=1.0),
                                       Version(latency_sigma=1.0), held=True, interval=10.0,
                                       answers=False),
    "held_hour.slow_tail": Case("slow_tail", Version(latency_sigma=0.5, slow_share=0.02),
                                Version(latency_sigma=0.5, slow_share=0.02), held=True,
                                interval=10.0, answers=False),
    "held_hour.crowd_15pct": Case("crowd_15pct", Version(Answers(mix=SKEWED, crowd=0.15)),
                                  Version(Answers(mix=SKEWED, crowd=0.15)), held=True),
    "held_hour.harmless_retrain": Case(
        "harmless_retrain", Version(Answers(mix=(0.351, 0.301, 0.348), shift=-0.2)),
        IDENTICAL, held=True),
    "promote.healthy": Case("healthy", IDENTICAL, IDENTICAL),
    "promote.healthy_demo": Case("healthy_demo", IDENTICAL, IDENTICAL, horizon=1800,
                                 interval=10.0, min_requests=100),
    "promote.retrain_demo": Case("retrain_demo",
                                 Version(Answers(mix=(0.351, 0.301, 0.348), shift=-0.2)),
                                 IDENTICAL, horizon=1800, interval=10.0, min_requests=100),
    "detect.score_shift": Case("score_shift", Version(Answers(shift=-1.0)), IDENTICAL),
    "detect.rare_swap": Case("rare_swap", Version(Answers(mix=TEN, names=(1, 0, *range(2, 10)))),
                             Version(Answers(mix=TEN)), probe=True),
    "detect.latency_1p5x": Case("latency_1p5x", Version(latency_factor=1.5), IDENTICAL),
    "detect.latency_2x": Case("latency_2x", Version(latency_factor=2.0), IDENTICAL),
    "detect.blind_15pct": Case("blind_15pct", Version(Answers(blind=0.15)), IDENTICAL),
    "detect.class_vanished": Case("class_vanished",
                                  Version(Answers(mix=TEN, names=(2, 1, *range(2, 10)))),
                                  Version(Answers(mix=TEN))),
    "detect.errors_5pct": Case("errors_5pct", Version(errors=0.05), IDENTICAL, horizon=900,
                               interval=5.0, rate=100.0),
    "detect.label_swap": Case("label_swap", Version(Answers(mix=SKEWED, names=(1, 0, 2))),
                              Version(Answers(mix=SKEWED)), horizon=1800, interval=10.0,
                              min_requests=100, probe=True),
    "detect.label_swap_class_mix": Case(
        "label_swap_class_mix", Version(Answers(mix=SKEWED, names=(1, 0, 2))),
        Version(Answers(mix=SKEWED)), horizon=1800, interval=10.0, min_requests=100),
}
HELD_RUNS_AT_LEAST = 300
SLOW_CASES = ("detect.rare_swap", "detect.label_swap")  # the probe: a val set per step


def run_case(rng: np.random.Generator, key: str, runs: int, seed: int = 1) -> dict[str, Any]:
    case = CASES[key]
    started = time.monotonic()
    stream = zlib.crc32(key.encode())  # the case's traffic: the same on any code
    results = [rollout(rng, case, np.random.default_rng([seed, stream, i]))
               for i in range(runs)]
    rolled = [r for r in results if r["outcome"] == "rollback"]
    low, high = stats.wilson_interval(len(rolled), runs, 1.96)
    row: dict[str, Any] = {
        "rollouts": runs, "rolled_back": len(rolled),
        "rate": len(rolled) / runs, "rate_95ci": [low, high],
        "promoted": sum(r["outcome"] == "promote" for r in results),
        "open": sum(r["outcome"] == "open" for r in results),
        "by_check": {}, "interval_s": case.interval, "rate_rps": case.rate,
        "horizon_s": case.horizon, "seconds": round(time.monotonic() - started, 1)}
    for r in rolled:
        for name in r["failed"]:
            row["by_check"][name] = row["by_check"].get(name, 0) + 1
    promoted = [r for r in results if r["outcome"] == "promote"]
    if promoted:
        secs = np.array([r["seconds"] for r in promoted])
        row["seconds_to_promotion_p50"] = float(np.percentile(secs, 50))
        row["seconds_to_promotion_p90"] = float(np.percentile(secs, 90))
    if rolled:
        reqs = np.array([r["canary_requests"] for r in rolled])
        row["canary_requests_to_rollback_p50"] = float(np.percentile(reqs, 50))
        row["canary_requests_to_rollback_p90"] = float(np.percentile(reqs, 90))
        row["canary_requests_to_rollback_mean"] = round(float(reqs.mean()), 2)
        looks = np.array([r["decisions"] for r in rolled])
        row["windows_to_rollback_p50"] = float(np.percentile(looks, 50))
        row["windows_to_rollback_p90"] = float(np.percentile(looks, 90))
        row["windows_to_rollback_mean"] = round(float(looks.mean()), 3)
        # the whole distribution: two codes on the same traffic compare window by window
        row["windows_to_rollback"] = {str(k): int(v) for k, v in
                                      zip(*np.unique(looks, return_counts=True))}
    print(f"{key:40s} {len(rolled):4d}/{runs} rolled back ({row['rate']:.2%}, 95% CI "
          f"{low:.2%}..{high:.2%}) by {row['by_check']}"
          + (f"; canary requests to rollback p50 {row['canary_requests_to_rollback_p50']:.0f} "
             f"p90 {row['canary_requests_to_rollback_p90']:.0f}" if rolled else "")
          + (f"; promoted {len(promoted)}, s to promotion p50 "
             f"{row['seconds_to_promotion_p50']:.0f} p90 {row['seconds_to_promotion_p90']:.0f}"
             if promoted else "")
          + f"  [{row['seconds']:.0f}s]", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--detect-runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--baseline", action="append", default=[],
                        help="a JSON this script wrote on the old code (repeatable: later files "
                             "override a case of earlier ones)")
    parser.add_argument("--baseline-code", default="",
                        help="what the baseline ran on, e.g. a commit (recorded with it)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/canary_guarantees.json"))
    args = parser.parse_args(argv)
    wanted = [k for k in CASES if not args.only or k in args.only.split(",")]
    if counter_increase is None:
        wanted = [k for k in wanted if CASES[k].reading != "exact" or not CASES[k].scrape]
    rng = np.random.default_rng(args.seed)
    started = time.monotonic()
    out = pathlib.Path(args.out)
    doc: dict[str, Any] = json.loads(out.read_text()) if out.is_file() and args.only else {}
    policy = CanaryPolicy()
    doc.update({
        "benchmark": "canary_guarantees",
        "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpu": platform.machine()},
        "stated_total_alpha": policy.alpha,
        "alpha_shares": dict(getattr(stats, "ALPHA_SHARES", {})),
        "per_image_classes": PER_IMAGE_CLASSES,
    })
    for key in wanted:
        runs = args.runs if key.startswith("held_hour.") else args.detect_runs
        if key.startswith("held_hour.") and runs < HELD_RUNS_AT_LEAST:
            print(f"note: {key} with {runs} < {HELD_RUNS_AT_LEAST} rollouts", flush=True)
        group, name = key.split(".", 1)
        doc.setdefault(group, {})[name] = run_case(rng, key, runs, args.seed) | {"seed": args.seed}
    if args.baseline:
        baseline: dict[str, Any] = {"code": args.baseline_code,
                                    "files": [pathlib.Path(p).name for p in args.baseline]}
        for path in args.baseline:
            base = json.loads(pathlib.Path(path).read_text())
            for group in ("held_hour", "detect"):
                for name, row in base.get(group, {}).items():
                    baseline.setdefault(group, {})[name] = row | {"seed": base.get("seed")}
        doc["baseline"] = baseline
    doc["seconds"] = round(doc.get("seconds", 0.0) * bool(args.only)
                           + time.monotonic() - started, 1)  # over the runs that wrote it
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
