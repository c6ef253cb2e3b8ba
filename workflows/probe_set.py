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

__all__ = ["NoProbeSet", "choose_probe_images", "write_probe_set"]


class NoProbeSet(Exception):
    """No probe image could be taken from the annotations (the message says why)."""


def choose_probe_images(annotations: pathlib.Path,
                        image_root: pathlib.Path | None = None) -> list[pathlib.Path]:
    """The val images to ship, in the order shipped: the first by `file_name` that exist
    next to the annotations and fit the caps. `NoProbeSet` when there is none."""
    try:
        doc = json.loads(annotations.read_text())
    except (OSError, ValueError) as exc:
        raise NoProbeSet(f"{annotations}: unreadable ({exc})") from None
    images = doc.get("images") if isinstance(doc, dict) else None
    if not isinstance(images, list):
        raise NoProbeSet(f"{annotations}: field 'images' is not a list (COCO format)")
    names: list[str] = sorted({name for i in images if isinstance(i, dict)
                               for name in [i.get("file_name")] if isinstance(name, str)})
    root = (image_root or annotations.parent).resolve()
    chosen: list[pathlib.Path] = []
    total = 0
    for name in names:
        if len(chosen) >= PROBE_MAX_IMAGES:
            break
        path = (root / name).resolve()
        # Only files of the set itself, of the kinds the server hands out, that exist here
        # (a repo may keep its images elsewhere: then it ships none, and says so).
        if not path.is_relative_to(root) or path.suffix.lower() not in IMAGE_SUFFIXES \
                or not path.is_file():
            continue
        size = path.stat().st_size
        if total + size > PROBE_MAX_BYTES:
            continue  # a large image is skipped; smaller ones may still fit
        total += size
        chosen.append(path)
    if not chosen:
        raise NoProbeSet(f"{annotations}: none of its {len(names)} images is a .png/.jpg "
                         f"file under {root} (file_name is read relative to that folder)")
    return chosen


def write_probe_set(annotations: pathlib.Path, model_dir: pathlib.Path,
                    image_root: pathlib.Path | None = None) -> str:
    """`<model_dir>/probe/NN-<name>` from `choose_probe_images`; says what it did. An
    export that already holds a probe set keeps it (its training code chose it). No
    usable image is not an error: the version is published without a probe set, and
    the paired answers check records "no probe" for it (never a pass)."""
    target = model_dir / PROBE_DIR
    if target.exists():
        return "probe set: kept the one the export holds"
    try:
        chosen = choose_probe_images(annotations, image_root)
    except NoProbeSet as exc:
        return (f"warning: no probe set shipped: {exc}; the canary's paired answers check "
                "will have no verdict on this version")
    target.mkdir()
    for index, path in enumerate(chosen):
        # The index keeps the chosen order (the server sorts by name) and makes
        # names from different folders distinct.
        shutil.copyfile(path, target / f"{index:02d}-{path.name}")
    return f"probe set: {len(chosen)} val images from {annotations}"
