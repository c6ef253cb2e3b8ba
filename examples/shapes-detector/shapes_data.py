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
images. Week 2
links week 1's unchanged files (same bytes, so the pins and the cache see them as the
same content) and draws only the new ones.

Every week also holds a fixed **holdout** split (``annotations/holdout.json``:
``num_val`` images drawn with their own seed, clean, the same bytes every week), which
the pipeline compares champion and challenger on when ``mlops.yaml`` pins it. The val
and holdout splits are 500 images each, sized for the gate's margin (docs/gate.md,
"Sizing the evaluation sets"); their first 200 images are the ones the 200-image splits
held, as val is drawn after train from the same generator and the holdout from its own. **Week 3**
is a batch with bad labels: 400 week-2 training images retired and 400 new ones
added, leaning to circles and squares (weights 2:2:1), and 3 in 4 of the new circle
and square boxes labelled as the other class (the pair and the share are ``swap``
and ``swap_share``); still 1,800 training images, so its fine-tune costs what week
2's does. Fine-tuned on it, production loses AP@0.5 for circle and square on the
holdout, well beyond the gate's class margin (benchmarks/results/gate_power.json), while
the same fine-tune on week 3 with clean labels gains.
"""

import functools
import math
import sys

import numpy as np
from PIL import Image, ImageDraw

from modelkit import datasets, synthetic
from modelkit.synthetic import SyntheticCoco

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
    "num_val": 500,
    "min_objects": 2,
    "max_objects": 6,
    "min_size": 14,
    "max_size": 44,
    "max_cover": 0.35,
}

MARKER = datasets.MARKER

# What each week changes, relative to the week before (see the module docstring), in
# 32nds of num_train: 1600 -> 50 retired, 250 added; a 32-image test set -> 1 and 5.
# Week 3's new labels are noisy: `swap_share` of its new boxes of the `swap` pair of
# class ids get the other one's label.
WEEKS = {
    1: {},
    2: {"retire_32nds": 1, "add_32nds": 5, "seed": 2026_02, "class_weights": [1, 1, 3]},
    3: {"retire_32nds": 8, "add_32nds": 8, "seed": 2026_03, "class_weights": [2, 2, 1],
        "swap": [1, 2], "swap_share": 0.75},
}
WEEK_MARKER = synthetic.WEEK_MARKER


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


@functools.lru_cache(maxsize=2)
def _grid(size):
    """(y, x) of every pixel, 0..1, in float32 steps (as the data was first drawn), as float64."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / (size - 1)
    return yy.astype(np.float64), xx.astype(np.float64)


def _background(rng, size):
    """Two-colour gradient + gaussian pixel noise + faint lines, as uint8 HxWx3.

    Each pixel is computed with the same float64 operations, in the same order, from
    the same random draws as the first (HxWx3) version, so the pixels are identical
    (tests/examples/test_generated_data_identity.py); but one colour plane at a time
    over contiguous memory, half the CPU (a 3-wide last axis makes numpy's loops slow).
    """
    c0 = np.array([rng.randint(0, 255) for _ in range(3)], dtype=np.float32)
    c1 = np.array([rng.randint(0, 255) for _ in range(3)], dtype=np.float32)
    angle = rng.uniform(0, 2 * math.pi)
    yy, xx = _grid(size)
    t = np.cos(angle) * xx + np.sin(angle) * yy
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    noise_rng = np.random.default_rng(rng.getrandbits(32))
    planes = noise_rng.normal(0, rng.uniform(4, 16), size=(size, size, 3)).transpose(2, 0, 1)
    rest = 1 - t
    for plane, a, b in zip(planes, c0.tolist(), c1.tolist()):
        plane += a * rest + b * t  # noise + gradient: the same sum as gradient + noise
    np.clip(planes, 0, 255, out=planes)
    image = Image.fromarray(np.ascontiguousarray(planes.astype(np.uint8).transpose(1, 2, 0)))
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


GENERATOR = SyntheticCoco(describe="synthetic shapes", categories=CATEGORIES,
                          defaults=DEFAULT_PARAMS, weeks=WEEKS, render_image=render_image,
                          error=DatasetError, png=synthetic.PNG_FAST, holdout=True)


def __getattr__(name):
    """ensure_dataset, write_week, load_split...: the kit's, under this module's name."""
    return synthetic.module_names(GENERATOR, name)


def main(argv=None):
    return GENERATOR.main(argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
