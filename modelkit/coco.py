"""COCO ground truth in the shape a training step wants: one box array per image."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["boxes_by_image"]


def boxes_by_image(coco: dict[str, Any], entries: Sequence[dict[str, Any]]) -> list[np.ndarray]:
    """[category_id, x, y, w, h] float32 arrays (N x 5), one per image in ``entries`` order;
    annotations of images not in ``entries`` (a ``--subset``) are left out."""
    by_id: dict[Any, list[list[float]]] = {e["id"]: [] for e in entries}
    for a in coco["annotations"]:
        if a["image_id"] in by_id:
            by_id[a["image_id"]].append([a["category_id"], *a["bbox"]])
    return [np.asarray(by_id[e["id"]], np.float32).reshape(-1, 5) for e in entries]
