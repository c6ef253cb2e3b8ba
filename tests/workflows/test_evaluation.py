"""The evaluator: equal to pycocotools' COCOeval, and strict about its inputs."""

import contextlib
import io
import json
import pathlib
import random

import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from workflows.evaluation import EvaluationError, evaluate_detections


def make_gt(seed: int, images: int = 30, per_image: int = 4) -> dict:
    rng = random.Random(seed)
    imgs = [
        {"id": i, "width": 128, "height": 128, "file_name": f"{i}.png"}
        for i in range(1, images + 1)
    ]
    anns = []
    for img in imgs:
        for _ in range(rng.randint(1, per_image)):
            w, h = rng.uniform(6, 40), rng.uniform(6, 40)
            x, y = rng.uniform(0, 128 - w), rng.uniform(0, 128 - h)
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": img["id"],
                    "category_id": rng.randint(1, 3),
                    "bbox": [x, y, w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
    cats = [{"id": i, "name": n} for i, n in ((1, "circle"), (2, "square"), (3, "triangle"))]
    return {"images": imgs, "annotations": anns, "categories": cats}


def random_predictions(gt: dict, seed: int) -> list:
    """Noisy copies of some ground truth, mislabelled ones and pure noise."""
    rng = random.Random(seed)
    dets = []
    for ann in gt["annotations"]:
        if rng.random() < 0.85:
            x, y, w, h = ann["bbox"]
            cat = ann["category_id"] if rng.random() < 0.9 else rng.randint(1, 3)
            dets.append(
                {
                    "image_id": ann["image_id"],
                    "category_id": cat,
                    "score": rng.random(),
                    "bbox": [
                        x + rng.gauss(0, 2),
                        y + rng.gauss(0, 2),
                        max(1.0, w * rng.uniform(0.8, 1.2)),
                        max(1.0, h * rng.uniform(0.8, 1.2)),
                    ],
                }
            )
    for _ in range(40):
        dets.append(
            {
                "image_id": rng.randint(1, len(gt["images"])),
                "category_id": rng.randint(1, 3),
                "score": rng.random() * 0.5,
                "bbox": [rng.uniform(0, 100), rng.uniform(0, 100), 15, 15],
            }
        )
    return dets


def reference_map(gt_path: pathlib.Path, dt_path: pathlib.Path) -> tuple[float, float]:
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(gt_path))
        dt = gt.loadRes(str(dt_path))
        ev = COCOeval(gt, dt, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(ev.stats[0]), float(ev.stats[1])


def dump(tmp_path: pathlib.Path, name: str, data) -> pathlib.Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_pycocotools_on_random_predictions(tmp_path, seed):
    gt = make_gt(seed)
    gt_path = dump(tmp_path, "gt.json", gt)
    dt_path = dump(tmp_path, "dt.json", random_predictions(gt, seed + 100))
    ours = evaluate_detections(gt_path, dt_path)
    ref_map, ref_map50 = reference_map(gt_path, dt_path)
    assert 0.05 < ours["map50"] < 0.99  # a non-trivial case, not all-or-nothing
    assert ours["map"] == pytest.approx(ref_map, abs=1e-6)
    assert ours["map50"] == pytest.approx(ref_map50, abs=1e-6)


def test_matches_pycocotools_on_real_predictions(trained_model):
    """The session's trained example: real detections from a real Paddle model."""
    ours = evaluate_detections(trained_model.val_json, trained_model.bbox_json)
    ref_map, ref_map50 = reference_map(trained_model.val_json, trained_model.bbox_json)
    assert ours["map"] == pytest.approx(ref_map, abs=1e-6)
    assert ours["map50"] == pytest.approx(ref_map50, abs=1e-6)


def test_perfect_predictions_score_one(tmp_path):
    gt = make_gt(5)
    dets = [
        {
            "image_id": a["image_id"],
            "category_id": a["category_id"],
            "bbox": a["bbox"],
            "score": 1.0,
        }
        for a in gt["annotations"]
    ]
    result = evaluate_detections(dump(tmp_path, "gt.json", gt), dump(tmp_path, "dt.json", dets))
    assert result["map50"] == pytest.approx(1.0)
    assert result["map"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "gt, dt, message",
    [
        ("{not json", [], "annotations"),
        ({"images": []}, [], "annotations"),
        (
            {"images": [{"id": 1}], "annotations": [{"image_id": 1}], "categories": [{"id": 1}]},
            [],
            "annotations[0]",
        ),
        (None, [], "no detections"),
        (
            None,
            [{"image_id": 999, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 1}],
            "image_id 999",
        ),
        (
            None,
            [{"image_id": 1, "category_id": 9, "bbox": [0, 0, 1, 1], "score": 1}],
            "category_id 9",
        ),
        (None, [{"image_id": 1}], "needs image_id, category_id, bbox and score"),
        (None, {"a": 1}, "expected a list"),
    ],
)
def test_bad_inputs_are_named(tmp_path, gt, dt, message):
    gt_path = (tmp_path / "gt.json")
    if isinstance(gt, str):
        gt_path.write_text(gt)
    else:
        gt_path.write_text(json.dumps(gt if gt is not None else make_gt(1)))
    dt_path = dump(tmp_path, "dt.json", dt)
    with pytest.raises(EvaluationError) as err:
        evaluate_detections(gt_path, dt_path)
    assert message in str(err.value)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(EvaluationError) as err:
        evaluate_detections(tmp_path / "nope.json", tmp_path / "dt.json")
    assert "nope.json" in str(err.value)
