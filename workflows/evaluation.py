"""COCO mAP of a detector's `bbox.json` against ground truth.

The arithmetic is faster-coco-eval's (a maintained C++ port of COCOeval
whose numbers match pycocotools; a test holds it to 1e-6), so we do not
re-implement matching. This module's job is the boundary: refuse corrupt or
empty inputs with a message naming the file, and return plain numbers.
"""

import contextlib
import io
import json
import pathlib
from typing import Any

from contracts.errors import ExitCode
from workflows.errors import StepError


class EvaluationError(StepError):
    """The evaluation inputs are unusable: the message names the file."""

    exit_code = ExitCode.BAD_INPUT


def _load_json(path: pathlib.Path, what: str) -> Any:
    if not path.is_file():
        raise EvaluationError(f"{what} {path}: not found")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EvaluationError(f"{what} {path}: not valid JSON ({exc})") from exc


def check_ground_truth(data: Any, path: pathlib.Path) -> None:
    """Refuse annotations that COCOeval would crash on or silently misread."""
    if not isinstance(data, dict):
        raise EvaluationError(
            f"annotations {path}: expected a COCO object, got {type(data).__name__}"
        )
    for key in ("images", "annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise EvaluationError(f"annotations {path}: missing or invalid {key!r} list")
    if not data["images"] or not data["categories"]:
        raise EvaluationError(f"annotations {path}: no images or no categories")
    for i, ann in enumerate(data["annotations"]):
        bbox = ann.get("bbox") if isinstance(ann, dict) else None
        if not (isinstance(bbox, list) and len(bbox) == 4) or "image_id" not in ann:
            raise EvaluationError(
                f"annotations {path}: annotations[{i}] needs image_id and bbox [x, y, w, h]"
            )


def check_predictions(
    data: Any, path: pathlib.Path, image_ids: set[int], cat_ids: set[int]
) -> None:
    """Refuse empty or malformed detections."""
    if not isinstance(data, list):
        raise EvaluationError(f"predictions {path}: expected a list of detections")
    if not data:
        raise EvaluationError(
            f"predictions {path}: no detections at all; the model predicted nothing on the val set"
        )
    for i, det in enumerate(data):
        if not isinstance(det, dict) or not {"image_id", "category_id", "bbox", "score"} <= set(
            det
        ):
            raise EvaluationError(
                f"predictions {path}: [{i}] needs image_id, category_id, bbox and score"
            )
        if det["image_id"] not in image_ids:
            raise EvaluationError(
                f"predictions {path}: [{i}] image_id {det['image_id']} is not in the ground truth"
            )
        if det["category_id"] not in cat_ids:
            raise EvaluationError(
                f"predictions {path}: [{i}] category_id {det['category_id']} is unknown"
            )


def evaluate_detections(annotations: pathlib.Path, predictions: pathlib.Path) -> dict[str, Any]:
    """Return `{map, map50, map75, images, detections}` for bbox detections."""
    # lazy: optional, faster-coco-eval
    from faster_coco_eval import COCO, COCOeval_faster

    gt_data = _load_json(annotations, "annotations")
    check_ground_truth(gt_data, annotations)
    dt_data = _load_json(predictions, "predictions")
    image_ids = {img["id"] for img in gt_data["images"]}
    cat_ids = {cat["id"] for cat in gt_data["categories"]}
    check_predictions(dt_data, predictions, image_ids, cat_ids)
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(gt_data)
        dt = gt.loadRes(dt_data)
        ev = COCOeval_faster(gt, dt, iouType="bbox", print_function=lambda *a, **k: None)
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    stats = [float(x) for x in ev.stats]
    return {
        "map": stats[0],
        "map50": stats[1],
        "map75": stats[2],
        "images": len(image_ids),
        "detections": len(dt_data),
    }
