"""The gate step's three outcomes from a paired comparison, as the pipeline reads them.

`mlops step gate` judges the `paired.json` the evaluate step wrote; here that file is
built from synthetic detections (tests/fixtures/detections.py) by the evaluate step's own
`workflows.paired_evaluation.paired_doc`, so no model is trained. The outputs are what the
pipeline's DAG reads: `passed` (on to publish and propose) and `outcome`.
"""

import json
import pathlib

import pytest
import yaml

from mlops.cli import main as cli
from promotion.decision.coco_ap import match_detections
from promotion.decision.paired import SetMatches
from tests.fixtures.detections import detect, make_gt
from tests.fixtures.training import copy_example, unpin
from workflows.paired_evaluation import paired_doc


def _paired(out: pathlib.Path, images: int, candidate_seed: int, **candidate) -> None:
    """Two evaluation sets; production is detector seed 3, the candidate another seed
    (a retrain with errors of its own: on few images the interval is wide) or the same
    seed with `candidate`'s changes (a fine-tune: the same errors, some fixed)."""
    entries, matches = [], []
    for name, seed in (("val", 2), ("holdout", 5)):
        gt = make_gt(seed, images=images)
        entries.append({"set": name, "pictures": {}})
        matches.append(SetMatches(name=name, class_names=SetMatches.names_of(gt),
                                  candidate=match_detections(
                                      gt, detect(gt, candidate_seed, **candidate)),
                                  production=match_detections(gt, detect(gt, 3))))
    full = out / "full"
    full.mkdir(parents=True)
    (full / "paired.json").write_text(json.dumps(paired_doc(entries, matches,
                                                            {"version": "v-prod"})))
    (full / "metrics.json").write_text(json.dumps({"map50": 0.5, "map": 0.3}))


def _gate(tmp_path: pathlib.Path, inconclusive: str, images: int, seed: int,
          **candidate) -> tuple[dict, dict]:
    repo = unpin(copy_example(tmp_path / f"repo-{inconclusive}-{images}"))
    cfg = yaml.safe_load((repo / "mlops.yaml").read_text())
    cfg["gate"].update(min=0.1, inconclusive=inconclusive)
    (repo / "mlops.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / f"out-{inconclusive}-{images}"
    _paired(out, images, seed, **candidate)
    assert cli(["step", "gate", "--repo", str(repo), "--out", str(out)]) == 0
    outputs = {p.name: p.read_text() for p in (out / "outputs").iterdir()}
    return outputs, json.loads((out / "full" / "gate.json").read_text())


@pytest.mark.parametrize("inconclusive, passed, outcome", [
    ("review", "true", "review"),  # proposed, marked for a human
    ("fail", "false", "fail"),
    ("pass", "true", "pass"),
])
def test_an_inconclusive_comparison_goes_where_gate_inconclusive_says(
        tmp_path, inconclusive, passed, outcome):
    outputs, gate = _gate(tmp_path, inconclusive, images=30, seed=4)
    assert gate["comparison"] == "inconclusive", gate["reason"]  # the premise
    assert (outputs["passed"], outputs["outcome"]) == (passed, outcome)
    assert gate["outcome"] == outcome
    # the run's record says how many images would settle it
    assert gate["plan"]["images_needed"] > gate["images"] == 60
    assert f"about {gate['plan']['images_needed']} would give 95%" in gate["reason"]


def test_a_fine_tune_that_shares_productions_errors_is_decided_on_the_same_images(tmp_path):
    """The same 60 images: a candidate making production's errors (and finding more boxes)
    differs from it on few images, so the paired interval is narrow and decides; the
    retrain above, with errors of its own, could not (docs/gate.md: a scratch retrain
    needs more images to be judged as fairly)."""
    _, gate = _gate(tmp_path, "fail", images=30, seed=3, recall=0.9)
    assert (gate["comparison"], gate["outcome"]) == ("non-inferior", "pass"), gate["reason"]


def test_mlops_gate_plan_reads_a_runs_comparison(tmp_path, capsys):
    _, gate = _gate(tmp_path, "review", images=30, seed=4)
    out = tmp_path / "out-review-30"
    (out / "run.json").write_text("{}")
    capsys.readouterr()
    assert cli(["gate", "plan", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["set"] for r in doc["rows"]] == ["all sets", "val", "holdout"]
    assert doc["rows"][0]["images_needed"] == gate["plan"]["images_needed"]
    assert cli(["gate", "plan", str(out), "--margin", "0.02"]) == 0
    text = capsys.readouterr().out
    assert "margin 0.0200" in text and "all sets" in text
    assert cli(["gate", "plan", str(tmp_path / "nowhere")]) != 0
    assert "no run records" in capsys.readouterr().err
    (out / "full" / "paired.json").unlink()  # a run that had no production
    assert cli(["gate", "plan", str(out)]) == 2
    assert "no paired comparison in this run" in capsys.readouterr().err
