"""Is the gate's verdict a coin flip? Many independently seeded retrains, each gated.

The shapes example's weekly loop, with real Paddle training and the served
exports: production is week 1 trained from scratch with the example's recipe
(2 ranks, the demo's first push); then, per seed, a **healthy** retrain (week 2's
data, the demo's `good` push: a 1-epoch fine-tune of production at lr 2e-3) and a
**bad-labels** retrain (week 3's data, 3 in 4 new circle/square labels swapped,
the same fine-tune). Each candidate's served detections on the evaluation sets
are gated against production's by the gate step's own code
(`workflows.steps.gate.paired_verdict` over `workflows.paired_evaluation`'s paired
records). Saves benchmarks/results/gate_power.json:

    {"healthy": {"trials", "passed", "inconclusive", "failed", ...},
     "bad_labels": {"trials", "failed", "inconclusive", "passed", ...}, ...}

plus, per set, the interval widths and the per-trial verdicts, and the same
trials judged on the first 200 images of each set (the sets' size before the
sets were sized from the plan) for comparison.

Every stage is kept in `--work` (data, production, each trial's export and
served detections), so a re-run only does what is missing; `--analyse-only`
re-judges the kept detections (e.g. after a change to the gate).

The kernels' code path is pinned the way the kit pins it for the examples
(`MKL_CBWR`, `modelkit.determinism`); `--cbwr` overrides it, e.g. to show that
another code path changes the weights but not the verdicts.

    python benchmarks/gate_power.py [--trials 20] [--work DIR] [--cbwr AVX2]
        [--analyse-only]
"""

import argparse
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from promotion.decision.coco_ap import match_detections  # noqa: E402
from promotion.decision.gate import GateConfig  # noqa: E402
from promotion.decision.paired import SetMatches  # noqa: E402
from workflows.config import load_config  # noqa: E402
from workflows.paired_evaluation import paired_doc  # noqa: E402
from workflows.served_cache import CachedExport  # noqa: E402
from workflows.steps.gate import paired_verdict  # noqa: E402

EXAMPLE = ROOT / "examples" / "shapes-detector"
RESULT = ROOT / "benchmarks" / "results" / "gate_power.json"
#: The demo's first push (the example's default recipe) and its weekly fine-tune.
FIRST = ["--epochs", "7"]
FINE_TUNE = ["--epochs", "1", "--lr", "0.002"]
KINDS = {"healthy": 2, "bad_labels": 3}
SETS = ("val", "holdout")


def _example_images() -> int:
    """The example's val and holdout size (its generator's `num_val`)."""
    sys.path.insert(0, str(EXAMPLE))
    import shapes_data

    return int(shapes_data.DEFAULT_PARAMS["num_val"])


def _env(cbwr: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", GLOG_minloglevel="2")
    if cbwr:
        env["MKL_CBWR"] = cbwr
    return env


def write_data(work: pathlib.Path, eval_images: int | None) -> pathlib.Path:
    """Weeks 1-3 of the example's data, as the demo's shared storage holds them (val and
    holdout of `eval_images` each; None: the example's own size)."""
    store = work / "store"
    size = ["--num-val", str(eval_images)] if eval_images else []
    for week in (1, 2, 3):
        subprocess.run([sys.executable, str(EXAMPLE / "shapes_data.py"), "--store", str(store),
                        "--week", str(week), *size], check=True, stdout=subprocess.DEVNULL)
    return store


def train(work: pathlib.Path, name: str, data: pathlib.Path, args: list[str],
          cbwr: str | None) -> pathlib.Path:
    """One 2-rank training run of the example (kept: skipped when its export exists)."""
    out = work / "runs" / name
    model = out / "model"
    if (model / "model.yaml").is_file():
        return model
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cmd = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2",
           "--log_dir", str(out / "logs"), str(EXAMPLE / "train.py"),
           "--output-dir", str(out), "--checkpoint-dir", str(out / "ckpt"),
           "--data-dir", str(data), "--log-every", "1000", *args]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=out, env=_env(cbwr), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"training {name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    (out / "seconds").write_text(f"{time.perf_counter() - start:.1f}\n")
    shutil.rmtree(out / "ckpt", ignore_errors=True)
    return model


def served(model: pathlib.Path, data: pathlib.Path) -> dict[str, list]:
    """The export's served detections on every evaluation set (kept beside the export)."""
    kept = model.parent / "served.json"
    if kept.is_file():
        return json.loads(kept.read_text())
    out = {}
    with CachedExport(model, model.parent.name, None) as export:
        for name in SETS:
            truth = json.loads((data / "annotations" / f"{name}.json").read_text())
            out[name] = json.loads(export.detections_json(truth, data / "images"))
    kept.write_text(json.dumps(out))
    return out


def _first(truth: dict, detections: list, images: int) -> tuple[dict, list]:
    keep = {e["id"] for e in truth["images"][:images]}
    return ({**truth, "images": truth["images"][:images],
             "annotations": [a for a in truth["annotations"] if a["image_id"] in keep]},
            [d for d in detections if d["image_id"] in keep])


def judge(gate: GateConfig, truths: dict, cand: dict, prod: dict, images: int | None) -> dict:
    """The gate step's verdict of one candidate (`paired_verdict`), on the first `images`
    images of each set (None: all)."""
    entries, matches = [], []
    for name in SETS:
        truth, c, p = truths[name], cand[name], prod[name]
        if images:
            (truth, c), (_, p) = _first(truth, c, images), _first(truth, p, images)
        entries.append({"set": name, "pictures": {}})
        matches.append(SetMatches(name=name, class_names=SetMatches.names_of(truth),
                                  candidate=match_detections(truth, c, "candidate"),
                                  production=match_detections(truth, p, "production")))
    return paired_verdict(gate, paired_doc(entries, matches, {"version": "production"}))


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 4), "max": round(max(values), 4),
            "mean": round(sum(values) / len(values), 4)}


def summary(verdicts: list[dict]) -> dict:
    outcomes = [v["outcome"] for v in verdicts]
    plans = [v["plan"] for v in verdicts]
    widths = {name: [s["difference"]["high"] - s["difference"]["low"]
                     for v in verdicts for s in v["sets"] if s["set"] == name] for name in SETS}
    return {
        "trials": len(verdicts),
        "passed": outcomes.count("pass"),
        "inconclusive": outcomes.count("review"),
        "failed": outcomes.count("fail"),
        # the rule before this one: every set's own interval above -max_regression
        "every_set_above_margin": sum(
            all(s["difference"]["low"] >= -v["max_regression"] for s in v["sets"])
            for v in verdicts),
        "pooled_interval_width": _spread([v["difference"]["high"] - v["difference"]["low"]
                                          for v in verdicts]),
        "power_for_an_equal_candidate": _spread([p["power"] for p in plans]),
        "images_needed_for_95pct_power": _spread([p["images_needed"] for p in plans]),
        "interval_width": {k: _spread(w) for k, w in widths.items()},
        "trials_detail": [
            {"outcome": v["outcome"], "worse_classes": v["worse_classes"],
             "difference": {k: round(v["difference"][k], 4)
                            for k in ("estimate", "low", "high")},
             "sets": {s["set"]: {"comparison": s["comparison"], "images": s["images"],
                                 "difference": {k: round(s["difference"][k], 4)
                                                for k in ("estimate", "low", "high")}}
                      for s in v["sets"]}}
            for v in verdicts],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20, help="seeds per kind")
    parser.add_argument("--work", default=str(ROOT / ".bench" / "gate_power"))
    parser.add_argument("--cbwr", default=None,
                        help="MKL_CBWR for training (default: the kit's pin)")
    parser.add_argument("--eval-images", type=int, default=None,
                        help="val and holdout images (default: the example's)")
    parser.add_argument("--analyse-only", action="store_true")
    parser.add_argument("--out", default=str(RESULT))
    a = parser.parse_args(argv)
    work = pathlib.Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    store = write_data(work, a.eval_images)
    gate = load_config(EXAMPLE).config.gate
    size = _example_images()
    truths = {name: json.loads((store / "week-1" / "annotations" / f"{name}.json").read_text())
              for name in SETS}
    production = train(work, "production", store / "week-1", FIRST, a.cbwr)
    prod = served(production, store / "week-1")
    results: dict = {}
    for kind, week in KINDS.items():
        verdicts, small = [], []
        for seed in range(1, a.trials + 1):
            name = f"{kind}-{seed}"
            model = work / "runs" / name / "model"
            if a.analyse_only and not (model.parent / "served.json").is_file():
                continue
            if not a.analyse_only:
                model = train(work, name, store / f"week-{week}",
                              [*FINE_TUNE, "--seed", str(seed), "--init-from", str(production)],
                              a.cbwr)
            cand = served(model, store / f"week-{week}")
            verdicts.append(judge(gate, truths, cand, prod, size))
            small.append(judge(gate, truths, cand, prod, 200))
            print(f"{name}: {verdicts[-1]['outcome']} ({verdicts[-1]['reason'][:160]})",
                  flush=True)
        results[kind] = summary(verdicts)
        results[f"{kind}_at_200_images"] = summary(small)
    doc = {
        "benchmark": "gate_power",
        "machine": {"python": platform.python_version(), "cpu": platform.machine(),
                    "cores": os.cpu_count(), "mkl_cbwr": a.cbwr or "the kit's pin"},
        "gate": gate.model_dump(),
        "images": {name: min(size, len(truths[name]["images"])) for name in SETS},
        "recipe": {"production": FIRST, "retrain": FINE_TUNE, "workers": 2},
        **results,
        "seconds": round(time.time() - started, 1),
    }
    pathlib.Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    for kind in KINDS:
        r = results[kind]
        print(f"{kind}: {r['passed']} passed, {r['inconclusive']} inconclusive, "
              f"{r['failed']} failed of {r['trials']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
