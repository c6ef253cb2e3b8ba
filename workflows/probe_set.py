"""The probe set `publish` ships with every export (`contracts.artifact.PROBE_DIR`).

The canary's paired answers check (`promotion/decision/answers.py`) asks stable
and canary the same real images; the stable's server hands them out from its
export (`serving/probe.py`). So that every model repo gets one without changing
its train.py, publish copies them from the evaluation set the pipeline already
knows (`evaluation.annotations`, COCO: each image's `file_name` is relative to
the annotations' folder, as evaluate reads it).

The choice is deterministic -- the first images by `file_name`, within
`PROBE_MAX_IMAGES` and `PROBE_MAX_BYTES` -- so a re-run ships the same set, and
32, not 16: the answers benchmark gave no verdict about 9 % of the time with 16
on a weak model. probe/ is not weights: the record's digest does not cover it.
"""

from __future__ import annotations

import json
import pathlib
import shutil

from contracts.artifact import PROBE_DIR, PROBE_MAX_BYTES, PROBE_MAX_IMAGES
from serving.probe import IMAGE_SUFFIXES
from workflows.errors import ConfigError

__all__ = ["choose_probe_images", "write_probe_set"]


def choose_probe_images(annotations: pathlib.Path) -> list[pathlib.Path]:
    """The val images to ship, in the order shipped: the first by `file_name` whose sizes
    fit the caps. `ConfigError` names the file and the field or image that is wrong."""
    try:
        doc = json.loads(annotations.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{annotations}: cannot read the evaluation annotations for the "
                          f"probe set ({exc})") from None
    images = doc.get("images") if isinstance(doc, dict) else None
    if not isinstance(images, list):
        raise ConfigError(f"{annotations}: field 'images' must be a list (COCO format)")
    names: list[str] = sorted({name for i in images if isinstance(i, dict)
                               for name in [i.get("file_name")] if isinstance(name, str)})
    root = annotations.parent.resolve()
    chosen: list[pathlib.Path] = []
    total = 0
    for name in names:
        if len(chosen) >= PROBE_MAX_IMAGES:
            break
        path = (root / name).resolve()
        if not path.is_relative_to(root):  # an annotation must not pick files outside its set
            raise ConfigError(f"{annotations}: image file_name {name!r} is outside {root}")
        if path.suffix.lower() not in IMAGE_SUFFIXES:
            continue  # the server hands out these kinds only
        try:
            size = path.stat().st_size
        except OSError:
            raise ConfigError(f"{annotations}: image {name!r} not found at {path}") from None
        if total + size > PROBE_MAX_BYTES:
            continue  # a large image is skipped; smaller ones may still fit
        total += size
        chosen.append(path)
    return chosen


def write_probe_set(annotations: pathlib.Path, model_dir: pathlib.Path) -> str:
    """`<model_dir>/probe/NN-<name>` from `choose_probe_images`; says what it did. An
    export that already holds a probe set keeps it (its training code chose it)."""
    target = model_dir / PROBE_DIR
    if target.exists():
        return "probe set: kept the one the export holds"
    chosen = choose_probe_images(annotations)
    target.mkdir()
    for index, path in enumerate(chosen):
        # The index keeps the chosen order (the server sorts by name) and makes
        # names from different folders distinct.
        shutil.copyfile(path, target / f"{index:02d}-{path.name}")
    return f"probe set: {len(chosen)} val images from {annotations}"
