"""An export's COCO detections on the val images, through the serving stack itself.

"Judge what we ship": the gate's numbers come from the exported directory as
the model server runs it (its `infer_cfg.yml` preprocessing, Paddle
Inference predictor, decode and labels: `serving.service.ModelService`,
in-process, no HTTP), not from the detections the training code wrote with
its own preprocessing. A serving-side mistake in the export (a wrong
normalisation in `infer_cfg.yml`) therefore shows in the mAP the gate reads.

The server answers boxes as (class id, score, x1, y1, x2, y2) in the image's
pixels with a class name per box; a COCO detection needs the ground truth's
category id and [x, y, w, h], so boxes are mapped through the class *name*
(the one thing both files share whatever the export's id scheme).
"""

import pathlib
from typing import Any, Mapping

import numpy as np

from serving.errors import ServingError
from serving.modeldir import load_model_dir
from serving.runtime import PredictorPool
from workflows.evaluation import EvaluationError

BATCH = 16
"""Images per predictor run: one request of a few images, as a client would send."""


def _names_to_ids(ground_truth: Mapping[str, Any]) -> dict[str, int]:
    return {str(c.get("name", c["id"])): int(c["id"]) for c in ground_truth["categories"]}


class ServedExport:
    """An export loaded into the serving stack once (its predictor is the costly part,
    ~0.5 s), then run on as many sets as needed: `detections(...)` per set. Close it
    (or use it in a `with`). Errors name the directory or file."""

    def __init__(self, model_dir: pathlib.Path, what: str = "model") -> None:
        from serving.service import ModelService

        self.model_dir = model_dir
        self.what = what
        try:
            model = load_model_dir(model_dir)
            self._pool = PredictorPool(model, threads=1, math_threads=1)
        except ServingError as exc:
            raise EvaluationError(f"{what} export {model_dir}: cannot be served: {exc}") from None
        try:
            self._service = ModelService(model, what, str(model.record.get("version", "")),
                                         self._pool)
        except BaseException:
            self._pool.shutdown()
            raise

    def __enter__(self) -> "ServedExport":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the predictor's worker thread."""
        self._pool.shutdown()

    def detections(self, ground_truth: Mapping[str, Any], image_root: pathlib.Path
                   ) -> list[dict[str, Any]]:
        """Run the export on every image of `ground_truth` (files under `image_root`);
        returns a COCO results list."""
        from serving.protocol import Tensor

        what, model_dir, service = self.what, self.model_dir, self._service
        ids = _names_to_ids(ground_truth)
        results: list[dict[str, Any]] = []
        images = list(ground_truth["images"])
        for start in range(0, len(images), BATCH):
            chunk = images[start:start + BATCH]
            data = np.empty(len(chunk), dtype=object)
            for i, image in enumerate(chunk):
                path = image_root / str(image["file_name"])
                try:
                    data[i] = path.read_bytes()
                except OSError as exc:
                    raise EvaluationError(f"val image {path}: {exc.strerror}") from None
            tensor = Tensor(service.image_input, "BYTES", (len(chunk),), data)
            try:
                outputs, _, _ = self._pool.submit(service.detect, tensor).result()
            except ServingError as exc:
                raise EvaluationError(f"{what} export {model_dir}: inference on "
                                      f"{chunk[0]['file_name']}..: {exc}") from None
            bbox, counts, labels = (t.data for t in outputs)
            row = 0
            for image, count in zip(chunk, counts.tolist()):
                for box, label in zip(bbox[row:row + count], labels[row:row + count]):
                    name = label.decode() if isinstance(label, bytes) else str(label)
                    if name not in ids:
                        raise EvaluationError(
                            f"{what} export {model_dir}: class {name!r} is not a category of "
                            f"the ground truth ({', '.join(ids)})")
                    x1, y1, x2, y2 = (float(v) for v in box[2:6])
                    results.append({"image_id": int(image["id"]), "category_id": ids[name],
                                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                                    "score": float(box[1])})
                row += count
        return results

