"""Synthetic "coloured shapes" object-detection dataset in COCO format.

Why synthetic: the pipeline needs a detector that trains to a high, *stable*
mAP in a few CPU minutes, with no download. Every image is drawn from a seeded
``random.Random``, so the same parameters always give the same files and the
same ``dataset_digest`` (sha256 over the generator parameters and the two
annotation files). The digest goes into ``model.yaml`` for lineage.

Layout written under ``<data-dir>``::

    train/000000.png ...   128x128 RGB
    val/000000.png ...
    train.json  val.json   COCO: images, annotations (bbox [x, y, w, h]), categories (ids from 1)
    DATASET.json           {"params": ..., "digest": ...}; written last, so its presence with a
                           matching digest means "complete" (idempotence and rank hand-off).

Each image has a noisy background (a random two-colour gradient plus per-pixel
noise and a few faint distractor lines) and 2-6 shapes (circle, square,
triangle) of 14-44 px, in random colours that contrast with the background. Shapes may
overlap, but a new shape is rejected if it would hide more than ~35 % of an
earlier one's box, so every annotated object stays visible.

Run ``python shapes_data.py --data-dir data`` to generate by hand.

**Weeks** (``--store DIR --week N``): the dataset as a team's shared storage holds it,
one full COCO dataset per week in the layout ``mlops data snapshot`` pins
(``DIR/week-N/annotations/{train,val}.json``, ``DIR/week-N/images/{train,val}/...``,
``file_name`` relative to ``images/``). Week 1 is the default dataset above, image for
image. Week 2 is what a weekly batch looks like: 50 week-1 training images retired,
250 new ones added whose class mix leans to triangles (weights 1:1:3), the val split
unchanged so the two weeks' models are compared on the same images; 1,800 training
images, so 12 epochs of it are fewer image-steps than 14 epochs of week 1. Week 2
links week 1's unchanged files (same bytes, so the pins and the cache see them as the
same content) and draws only the new ones.
"""

import argparse
import fcntl
import hashlib
import json
import math
import os
import pathlib
import random
import sys

import numpy as np
from PIL import Image, ImageDraw

from modelkit.files import atomic_write, atomic_write_text

CATEGORIES = [
    {"id": 1, "name": "circle", "supercategory": "shape"},
    {"id": 2, "name": "square", "supercategory": "shape"},
    {"id": 3, "name": "triangle", "supercategory": "shape"},
]

# Part of the digest. Bump "generator" whenever the drawing code changes, so an old
# dataset on disk is not mistaken for the new one.
DEFAULT_PARAMS = {
    "generator": "shapes-v2",
    "seed": 1234,
    "image_size": 128,
    "num_train": 1600,
    "num_val": 200,
    "min_objects": 2,
    "max_objects": 6,
    "min_size": 14,
    "max_size": 44,
    "max_cover": 0.35,
}

MARKER = "DATASET.json"

# What each week changes, relative to the week before (see the module docstring), in
# 32nds of num_train: 1600 -> 50 retired, 250 added; a 32-image test set -> 1 and 5.
WEEKS = {
    1: {},
    2: {"retire_32nds": 1, "add_32nds": 5, "seed": 2026_02, "class_weights": [1, 1, 3]},
}
WEEK_MARKER = "WEEK.json"


class DatasetError(Exception):
    """The data directory cannot be used (not creatable, half-written by someone else...)."""

    exit_code = 2


def _contrasting_colour(rng, background):
    """A saturated colour at least a fixed distance from the local background colour."""
    for _ in range(50):
        colour = tuple(rng.randint(0, 255) for _ in range(3))
        if sum(abs(c - b) for c, b in zip(colour, background)) > 200:
            return colour
    return tuple(255 - b for b in background)


def _background(rng, size):
    """Two-colour gradient + gaussian pixel noise + faint lines, as uint8 HxWx3."""
    c0 = np.array([rng.randint(0, 255) for _ in range(3)], dtype=np.float32)
    c1 = np.array([rng.randint(0, 255) for _ in range(3)], dtype=np.float32)
    angle = rng.uniform(0, 2 * math.pi)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / (size - 1)
    t = (np.cos(angle) * xx + np.sin(angle) * yy)
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    img = c0[None, None, :] * (1 - t[..., None]) + c1[None, None, :] * t[..., None]
    noise_rng = np.random.default_rng(rng.getrandbits(32))
    img += noise_rng.normal(0, rng.uniform(4, 16), size=img.shape)
    image = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randint(0, 3)):
        pts = [(rng.randint(0, size), rng.randint(0, size)) for _ in range(2)]
        shade = tuple(int(v) for v in (c0 + c1) / 2 + rng.uniform(-40, 40))
        draw.line(pts, fill=shade, width=1)
    return image


def _covered_fraction(box, other):
    """Fraction of ``other``'s area that ``box`` would cover (boxes as x0, y0, x1, y1)."""
    ix = max(0, min(box[2], other[2]) - max(box[0], other[0]))
    iy = max(0, min(box[3], other[3]) - max(box[1], other[1]))
    area = (other[2] - other[0]) * (other[3] - other[1])
    return ix * iy / max(area, 1e-6)


def _draw_shape(draw, kind, box, colour, rng):
    """Draw one shape filling ``box``; return its tight box (x0, y0, x1, y1) in pixel edges."""
    x0, y0, x1, y1 = box
    if kind == "circle":
        draw.ellipse([x0, y0, x1 - 1, y1 - 1], fill=colour)
    elif kind == "square":
        draw.rectangle([x0, y0, x1 - 1, y1 - 1], fill=colour)
    else:
        apex_x = x0 + rng.uniform(0.3, 0.7) * (x1 - x0)
        draw.polygon([(apex_x, y0), (x1 - 1, y1 - 1), (x0, y1 - 1)], fill=colour)
    return box


def render_image(rng, params):
    """One image and its objects: (PIL image, [(category_id, (x0, y0, x1, y1)), ...])."""
    size = params["image_size"]
    image = _background(rng, size)
    draw = ImageDraw.Draw(image)
    arr = np.asarray(image)
    objects = []
    wanted = rng.randint(params["min_objects"], params["max_objects"])
    for _ in range(wanted * 8):
        if len(objects) == wanted:
            break
        weights = params.get("class_weights")
        cat = (rng.choices(range(1, len(CATEGORIES) + 1), weights=weights)[0] if weights
               else rng.randint(1, len(CATEGORIES)))
        side = rng.randint(params["min_size"], params["max_size"])
        w = side
        h = side
        if cat == 3:  # triangles: aspect ratio varies a little
            h = min(params["max_size"], max(params["min_size"], int(side * rng.uniform(0.8, 1.1))))
        x0 = rng.randint(0, size - w)
        y0 = rng.randint(0, size - h)
        box = (x0, y0, x0 + w, y0 + h)
        if any(_covered_fraction(box, other) > params["max_cover"] for _, other in objects):
            continue
        local = arr[y0:y0 + h, x0:x0 + w].reshape(-1, 3).mean(axis=0)
        colour = _contrasting_colour(rng, tuple(int(v) for v in local))
        _draw_shape(draw, CATEGORIES[cat - 1]["name"], box, colour, rng)
        objects.append((cat, box))
    return image, objects


def _write_split(root, split, count, rng, params, prefix="", first_id=1, first_ann=1):
    """Write the PNGs of one split and return its COCO dict."""
    folder = root / split
    folder.mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for index in range(count):
        image, objects = render_image(rng, params)
        name = f"{prefix}{index:06d}.png"
        atomic_write(folder / name, lambda tmp: image.save(tmp, format="PNG"))
        image_id = first_id + index
        images.append({"id": image_id, "file_name": f"{split}/{name}",
                       "width": params["image_size"], "height": params["image_size"]})
        for cat, (x0, y0, x1, y1) in objects:
            w, h = x1 - x0, y1 - y0
            annotations.append({"id": first_ann + len(annotations), "image_id": image_id,
                                "category_id": cat, "bbox": [x0, y0, w, h],
                                "area": w * h, "iscrowd": 0})
    return {"info": {"description": f"synthetic shapes, {split}", "params": params},
            "images": images, "annotations": annotations, "categories": CATEGORIES}


def digest_of(root, params):
    """sha256 over the canonical params and the bytes of train.json and val.json."""
    h = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
    for name in ("train.json", "val.json"):
        h.update(name.encode())
        h.update((root / name).read_bytes())
    return "sha256:" + h.hexdigest()


def existing_digest(root, params):
    """The digest of a complete dataset with these params in ``root``, else None."""
    marker = root / MARKER
    try:
        meta = json.loads(marker.read_text())
        if meta.get("params") != params:
            return None
        digest = digest_of(root, params)
    except (OSError, ValueError):
        return None
    if digest != meta.get("digest"):
        return None
    for split, key in (("train", "num_train"), ("val", "num_val")):
        if not (root / split / f"{params[key] - 1:06d}.png").is_file():
            return None
    return digest


def ensure_dataset(data_dir, params=None):
    """Generate the dataset into ``data_dir`` unless it is already there; return its digest.

    Safe to call from every rank at once: an exclusive ``flock`` on
    ``<data-dir>/.lock`` lets one process generate while the others wait, then
    they find the marker and return. On separate filesystems each rank simply
    generates the identical dataset itself.
    """
    params = dict(DEFAULT_PARAMS if params is None else params)
    root = pathlib.Path(data_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = open(root / ".lock", "a")
    except OSError as exc:
        raise DatasetError(f"cannot create data dir {root}: {exc.strerror}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        digest = existing_digest(root, params)
        if digest is not None:
            return digest
        rng = random.Random(params["seed"])
        for split, key in (("train", "num_train"), ("val", "num_val")):
            coco = _write_split(root, split, params[key], rng, params)
            atomic_write_text(root / f"{split}.json", json.dumps(coco, indent=None))
        digest = digest_of(root, params)
        atomic_write_text(root / MARKER, json.dumps({"params": params, "digest": digest}, indent=2))
        return digest


def _link(src, dest):
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        dest.unlink()
    try:
        os.link(src, dest)
    except OSError:
        import shutil
        shutil.copyfile(src, dest)


def write_week(store, week, params=None):
    """Week ``week``'s full COCO dataset under ``store/week-<week>`` (idempotent); its path."""
    if week not in WEEKS:
        raise DatasetError(f"no week {week}: the generator knows weeks {sorted(WEEKS)}")
    params = dict(DEFAULT_PARAMS if params is None else params)
    root = pathlib.Path(store) / f"week-{week}"
    wanted = {"week": week, "params": params, "change": WEEKS[week]}
    try:
        if json.loads((root / WEEK_MARKER).read_text()) == wanted:
            return root
    except (OSError, ValueError):
        pass
    try:
        (root / "annotations").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(f"cannot create {root}: {exc.strerror}") from None
    if week == 1:
        rng = random.Random(params["seed"])
        for split, key in (("train", "num_train"), ("val", "num_val")):
            coco = _write_split(root / "images", split, params[key], rng, params)
            atomic_write_text(root / "annotations" / f"{split}.json", json.dumps(coco))
    else:
        before = write_week(store, week - 1, params)
        change = WEEKS[week]
        retire = params["num_train"] * change["retire_32nds"] // 32
        add = params["num_train"] * change["add_32nds"] // 32
        for split in ("train", "val"):
            coco = json.loads((before / "annotations" / f"{split}.json").read_text())
            if split == "val":  # unchanged, byte for byte: the same pinned file
                for entry in coco["images"]:
                    _link(before / "images" / entry["file_name"],
                          root / "images" / entry["file_name"])
                _link(before / "annotations" / "val.json", root / "annotations" / "val.json")
                continue
            if split == "train":
                gone = {i["id"] for i in coco["images"][:retire]}
                coco["images"] = coco["images"][retire:]
                coco["annotations"] = [a for a in coco["annotations"]
                                       if a["image_id"] not in gone]
            for entry in coco["images"]:
                _link(before / "images" / entry["file_name"], root / "images" / entry["file_name"])
            if split == "train":
                new = _write_split(
                    root / "images", split, add, random.Random(change["seed"]),
                    dict(params, class_weights=change["class_weights"]), prefix=f"w{week}-",
                    first_id=max(i["id"] for i in coco["images"]) + 1,
                    first_ann=max(a["id"] for a in coco["annotations"]) + 1)
                coco["images"] += new["images"]
                coco["annotations"] += new["annotations"]
            coco["info"] = {"description": f"synthetic shapes, {split}, week {week}"}
            atomic_write_text(root / "annotations" / f"{split}.json", json.dumps(coco))
    atomic_write_text(root / WEEK_MARKER, json.dumps(wanted, indent=2))
    return root


def _layout(data_dir, split):
    """(annotation file, image root) of a split: the pinned COCO layout prepare-data lays out
    (``annotations/<split>.json``, files under ``images/``) or the generated one."""
    root = pathlib.Path(data_dir)
    pinned = root / "annotations" / f"{split}.json"
    if pinned.is_file():
        return pinned, root / "images"
    return root / f"{split}.json", root


def has_dataset(data_dir):
    """Is there a train and a val split in ``data_dir`` (either layout)?"""
    return all(_layout(data_dir, split)[0].is_file() for split in ("train", "val"))


def dataset_digest(data_dir):
    """The digest of the data in ``data_dir``: the pin's (``datalock.json``, the dataset
    the pipeline verified) or the generator's (``DATASET.json``); "" if neither says."""
    root = pathlib.Path(data_dir)
    for name in ("datalock.json", MARKER):
        try:
            return json.loads((root / name).read_text())["digest"]
        except (OSError, ValueError, KeyError):
            continue
    return ""


def load_split(data_dir, split, limit=None):
    """(images uint8 NxHxWx3, COCO dict) for one split; ``limit`` keeps the first N images."""
    annotations, image_root = _layout(data_dir, split)
    coco = json.loads(annotations.read_text())
    entries = coco["images"][:limit] if limit else coco["images"]
    images = np.stack([np.asarray(Image.open(image_root / e["file_name"]).convert("RGB"))
                       for e in entries])
    return images, coco, entries


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--seed", type=int, default=DEFAULT_PARAMS["seed"])
    parser.add_argument("--num-train", type=int, default=DEFAULT_PARAMS["num_train"])
    parser.add_argument("--num-val", type=int, default=DEFAULT_PARAMS["num_val"])
    parser.add_argument("--store", default=None, metavar="DIR",
                        help="write week --week's dataset into DIR/week-N (the pinned layout)")
    parser.add_argument("--week", type=int, default=1, help="which week (with --store)")
    args = parser.parse_args(argv)
    params = dict(DEFAULT_PARAMS, seed=args.seed, num_train=args.num_train, num_val=args.num_val)
    try:
        if args.store:
            print(write_week(args.store, args.week, params))
            return 0
        print(ensure_dataset(args.data_dir, params))
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
