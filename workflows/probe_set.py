"""The probe set `publish` ships with every export (`contracts.artifact.PROBE_DIR`).

The images the canary's paired answers check (`promotion/decision/answers.py`) asks stable
and canary, drawn from the evaluation set (`evaluation.annotations`, COCO) by
`stratified_sample`: round by round the class with the fewest chosen images gets one more,
at random, within `PROBE_MAX_IMAGES` and `PROBE_MAX_BYTES`, images without objects filling
the rest; seeded by the annotations' content. probe/ is not weights: the record's digest
does not cover it. Why random and stratified: docs/canary.md.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import shutil
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from contracts.artifact import PROBE_DIR, PROBE_MAX_BYTES, PROBE_MAX_IMAGES
from serving.probe import IMAGE_SUFFIXES

__all__ = ["NoProbeSet", "choose_probe_images", "stratified_sample", "write_probe_set"]


class NoProbeSet(Exception):
    """No probe image could be taken from the annotations (the message says why)."""


def stratified_sample(image_classes: Sequence[set[str]], k: int, rng: np.random.Generator,
                      fits: Callable[[int], bool] | None = None) -> list[int]:
    """Up to `k` image indices, stratified by class (pure but for `rng`): round by round
    the class with the fewest chosen images (ties: the one the set holds least often,
    then by name) gets one more, drawn at random among its images not chosen yet;
    images `fits` refuses (too large for what is left) are passed over. When no class
    can take more, the rest is drawn at random among the images left."""
    holding: dict[str, list[int]] = {}
    for index, classes in enumerate(image_classes):
        for name in classes:
            holding.setdefault(name, []).append(index)
    chosen: list[int] = []
    taken: set[int] = set()
    have = dict.fromkeys(holding, 0)
    open_classes = set(holding)
    while len(chosen) < k and open_classes:
        name = min(open_classes, key=lambda c: (have[c], len(holding[c]), c))
        left = [i for i in holding[name] if i not in taken]
        pick = None
        while left:
            j = int(rng.integers(len(left)))
            candidate = left.pop(j)
            taken.add(candidate)
            if fits is None or fits(candidate):
                pick = candidate
                break
        if pick is None:
            open_classes.discard(name)
            continue
        chosen.append(pick)
        for c in image_classes[pick]:
            have[c] += 1
    rest = [i for i in range(len(image_classes)) if i not in taken]
    while len(chosen) < k and rest:
        candidate = rest.pop(int(rng.integers(len(rest))))
        if fits is None or fits(candidate):
            chosen.append(candidate)
    return chosen


def choose_probe_images(annotations: pathlib.Path,
                        image_root: pathlib.Path | None = None) -> list[pathlib.Path]:
    """The val images to ship, in the order shipped: drawn at random, stratified by the
    classes of their boxes (`stratified_sample`, seeded by the annotations' content),
    among those that exist next to the annotations, within the caps. `NoProbeSet` when
    there is none."""
    try:
        raw = annotations.read_bytes()
        doc = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise NoProbeSet(f"{annotations}: unreadable ({exc})") from None
    images = doc.get("images") if isinstance(doc, dict) else None
    if not isinstance(images, list):
        raise NoProbeSet(f"{annotations}: field 'images' is not a list (COCO format)")
    names: dict[Any, str] = {i.get("id"): i["file_name"] for i in images
                             if isinstance(i, dict) and isinstance(i.get("file_name"), str)}
    categories = {c.get("id"): str(c.get("name", c.get("id")))
                  for c in doc.get("categories") or [] if isinstance(c, dict)}
    classes: dict[str, set[str]] = {name: set() for name in names.values()}
    for ann in doc.get("annotations") or []:
        if isinstance(ann, dict) and ann.get("image_id") in names:
            classes[names[ann["image_id"]]].add(
                categories.get(ann.get("category_id"), str(ann.get("category_id"))))
    root = (image_root or annotations.parent).resolve()
    usable: list[tuple[pathlib.Path, set[str]]] = []
    for name in sorted(classes):
        path = (root / name).resolve()
        # Only files of the set itself, of the kinds the server hands out, that exist here
        # (a repo may keep its images elsewhere: then it ships none, and says so).
        if path.is_relative_to(root) and path.suffix.lower() in IMAGE_SUFFIXES \
                and path.is_file():
            usable.append((path, classes[name]))
    if not usable:
        raise NoProbeSet(f"{annotations}: none of its {len(classes)} images is a .png/.jpg "
                         f"file under {root} (file_name is read relative to that folder)")
    seed = int.from_bytes(hashlib.sha256(raw).digest()[:8], "big")
    used = [0]

    def fits(index: int) -> bool:
        size = usable[index][0].stat().st_size
        if used[0] + size > PROBE_MAX_BYTES:
            return False  # a large image is passed over; smaller ones may still fit
        used[0] += size
        return True

    picked = stratified_sample([c for _, c in usable], PROBE_MAX_IMAGES,
                               np.random.default_rng(seed), fits)
    if not picked:
        raise NoProbeSet(f"{annotations}: no image fits in {PROBE_MAX_BYTES} bytes")
    return [usable[i][0] for i in picked]


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
