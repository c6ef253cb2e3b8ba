"""Champion vs challenger on the same images: what the evaluate step does once production exists.

Both exports run through the serving stack (`workflows.served`; an export's
detections on images it already ran on come from `workflows.served_cache`) on each
evaluation set (the val set, and a holdout set when one is given), and
`promotion.decision.paired` compares them with a seeded paired bootstrap. Per set this
writes, into the run's output folder:

* `served-<set>-candidate.json`, `served-<set>-production.json`: COCO detections;
* `disagreements-<set>.png`, `pr-<set>.png`: the pictures the PR links;

and returns one JSON-able record per set, plus the sets pooled (`promotion.decision.
paired.compare_sets`: each set resampled within itself, one simultaneous band over every
class of every set), in `paired.json`, which the gate reads.
"""

import contextlib
import json
import pathlib
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from promotion.decision.coco_ap import Matched, average_precision, match_detections, mean_ap
from promotion.decision.paired import DetectionInputError, SetMatches, compare_sets
from promotion.reports.comparison_pictures import (
    disagreement_matched,
    plot_disagreements,
    plot_pr_curves,
    pr_curve_matched,
)
from workflows.evaluation import EvaluationError, _load_json, check_ground_truth
from workflows.served_cache import CachedExport, ServedCache

PAIRED_FILE = "paired.json"
RESAMPLES = 1000
SEED = 0


@dataclass(frozen=True)
class EvalSet:
    """A COCO ground truth and the folder its `file_name`s are relative to."""

    name: str
    annotations: pathlib.Path
    images: pathlib.Path


def matched_metrics(matched: Matched) -> dict[str, float]:
    """mAP@0.5, mAP@[.5:.95] and mAP@0.75 (COCO's numbers, `promotion.decision.coco_ap`) of
    detections already matched; zero detections score 0 here instead of being refused: a
    served export that finds nothing is a verdict for the gate, not a broken input."""
    ap = average_precision(matched, np.ones((1, len(matched.image_ids)), dtype=np.int64))
    means = mean_ap(ap)
    present = matched.gt_counts.sum(axis=0) > 0
    return {"map50": float(means["map50"][0]), "map": float(means["map"][0]),
            "map75": float(np.nanmean(ap[0, 5, present]))}


def compare_on(eval_set: EvalSet, candidate: CachedExport, production: CachedExport,
               out: pathlib.Path, production_version: str) -> tuple[dict[str, Any], SetMatches]:
    """Both exports on one set: metrics, detections and pictures, and the matches the
    paired bootstrap of all sets takes."""
    truth = _load_json(eval_set.annotations, "annotations")
    check_ground_truth(truth, eval_set.annotations)
    files, texts = {}, {}
    for who, model in (("candidate", candidate), ("production", production)):
        texts[who] = model.detections_json(truth, eval_set.images)
        path = out / f"served-{eval_set.name}-{who}.json"
        path.write_text(texts[who])
        files[who] = str(path)
    cand, prod = json.loads(texts["candidate"]), json.loads(texts["production"])
    try:
        # Matched once per model: the bootstrap, the metrics and the ranking all read it.
        matched_c = match_detections(truth, cand, "candidate")
        matched_p = match_detections(truth, prod, "production")
    except DetectionInputError as exc:
        raise EvaluationError(f"annotations {eval_set.annotations}: {exc}") from None
    pictures = {
        "disagreements": out / f"disagreements-{eval_set.name}.png",
        "pr_curves": out / f"pr-{eval_set.name}.png",
    }
    ranked = disagreement_matched(matched_c, matched_p)
    shown = plot_disagreements(truth, eval_set.images, cand, prod, ranked,
                               pictures["disagreements"])
    plot_pr_curves({"candidate": pr_curve_matched(matched_c),
                    f"production {production_version}": pr_curve_matched(matched_p)},
                   pictures["pr_curves"], f"precision-recall at IoU 0.5 ({eval_set.name})")
    return {
        "set": eval_set.name,
        "annotations": str(eval_set.annotations),
        "candidate_metrics": matched_metrics(matched_c),
        "production_metrics": matched_metrics(matched_p),
        "detections": files,
        "pictures": {k: str(v) for k, v in pictures.items()},
        "most_disagreement": [{"image_id": i, "disagreement": d} for i, d in ranked[:len(shown)]],
    }, SetMatches(name=eval_set.name, class_names=SetMatches.names_of(truth),
                  candidate=matched_c, production=matched_p)


def paired_doc(entries: Sequence[dict[str, Any]], matches: Sequence[SetMatches],
               production: dict[str, Any], resamples: int = RESAMPLES,
               seed: int = SEED) -> dict[str, Any]:
    """`paired.json`'s content: each set's record with its paired result, and the pool."""
    try:
        compared = compare_sets(matches, resamples=resamples, seed=seed)
    except DetectionInputError as exc:
        raise EvaluationError(f"evaluation sets {', '.join(m.name for m in matches)}: "
                              f"{exc}") from None
    return {"production": production, "pooled": compared.pooled.model_dump(),
            "sets": [{**entry, "paired": compared.sets[m.name].model_dump()}
                     for entry, m in zip(entries, matches)]}


def compare_with_production(sets: Sequence[EvalSet], candidate_dir: pathlib.Path,
                            production_dir: pathlib.Path, production_version: str,
                            out: pathlib.Path, cache: ServedCache | None = None
                            ) -> dict[str, Any]:
    """Every set compared; writes and returns `paired.json`'s content. With a `cache`,
    an export's detections on images it already ran on come from there
    (`workflows.served_cache`)."""
    with contextlib.ExitStack() as stack:
        # Each export's predictor is made once, when first needed, and runs on every set.
        candidate = stack.enter_context(CachedExport(candidate_dir, "candidate", cache))
        production = stack.enter_context(CachedExport(production_dir, "production", cache))
        compared = [compare_on(s, candidate, production, out, production_version)
                    for s in sets]
    doc = paired_doc([entry for entry, _ in compared], [m for _, m in compared],
                     {"version": production_version, "model_dir": str(production_dir)})
    (out / PAIRED_FILE).write_text(json.dumps(doc, indent=2) + "\n")
    return doc
