"""Synthetic "product shelf" object-detection dataset in COCO format.

Why synthetic: the pipeline needs a detector that trains from scratch to a
high, *stable* mAP in a few CPU minutes, with no download. Every image is
drawn from a seeded ``random.Random``, so the same parameters always give the
same files and the same ``dataset_digest`` (sha256 over the generator
parameters and the two annotation files), which goes into ``model.yaml``.

Layout written under ``<data-dir>``::

    train/000000.png ...   160x160 RGB
    val/000000.png ...
    train.json  val.json   COCO: images, annotations (bbox [x, y, w, h]), categories (ids from 1)
    DATASET.json           {"params": ..., "digest": ...}; written last, so its presence with a
                           matching digest means "complete" (idempotence and rank hand-off).

An image is a shelf unit seen from the front: a wall colour with noise, 1-3
shelf boards (so the products' scale changes threefold between images), and on
each board a row of products standing side by side: four classes that differ
in silhouette and in their details, not only in colour (colours are random for
every class):

* ``box``    tall rectangle, a light label panel and a stripe;
* ``bottle`` narrow body, a neck and a cap;
* ``can``    short cylinder, metallic rim ellipses at top and bottom, a band;
* ``jar``    wide rounded body and a dark lid.

Clutter: price tags on the boards, faint vertical lines and blobs on the wall,
and partial products cut by the image edge (annotated with their visible box
only when at least 60 % is visible, otherwise not drawn).

Run ``python shelf_data.py --data-dir data`` to generate by hand.

**Weeks** (``--store DIR --week N``): the dataset as a team's shared storage holds it,
one full COCO dataset per week in the layout ``mlops data snapshot`` pins
(``DIR/week-N/annotations/{train,val}.json``, ``DIR/week-N/images/{train,val}/...``,
``file_name`` relative to ``images/``). Week 1 is the default dataset above, image for
image. Week 2 is a weekly batch: 62 week-1 training images retired, 312 new ones added
whose shelves hold more bottles (class weights 1:3:1:1), the val split unchanged so the
two weeks' models are compared on the same images. Week 2 links week 1's unchanged
files (same bytes: the pins and the cache see the same content) and draws only the new.
"""

import sys

import numpy as np
from PIL import Image, ImageDraw

from modelkit import datasets, synthetic
from modelkit.synthetic import SyntheticCoco

CATEGORIES = [
    {"id": 1, "name": "box", "supercategory": "product"},
    {"id": 2, "name": "bottle", "supercategory": "product"},
    {"id": 3, "name": "can", "supercategory": "product"},
    {"id": 4, "name": "jar", "supercategory": "product"},
]

# What each week changes, relative to the week before, in 32nds of num_train:
# 2000 -> 62 retired, 312 added.
WEEKS = {
    1: {},
    2: {"retire_32nds": 1, "add_32nds": 5, "seed": 2026_02, "class_weights": [1, 3, 1, 1]},
}
WEEK_MARKER = synthetic.WEEK_MARKER

# Part of the digest. Bump "generator" whenever the drawing code changes, so an old
# dataset on disk is not mistaken for the new one.
DEFAULT_PARAMS = {
    "generator": "shelf-v1",
    "seed": 4321,
    "image_size": 160,
    "num_train": 2000,
    "num_val": 200,
    "min_shelves": 1,
    "max_shelves": 3,
}

# (width / height) range of each class, and its height as a share of the shelf row.
ASPECT = {"box": (0.55, 0.85), "bottle": (0.28, 0.4), "can": (0.55, 0.75), "jar": (0.95, 1.3)}
HEIGHT = {"box": (0.6, 0.9), "bottle": (0.65, 0.92), "can": (0.4, 0.6), "jar": (0.4, 0.6)}

MARKER = datasets.MARKER


class DatasetError(Exception):
    """The data directory cannot be used (not creatable, half-written by someone else...)."""

    exit_code = 2


def _colour(rng, lo=30, hi=235):
    return tuple(rng.randint(lo, hi) for _ in range(3))


def _shade(colour, f):
    return tuple(max(0, min(255, int(c * f))) for c in colour)


def _wall(rng, size):
    """Wall colour + vertical gradient + gaussian noise, as a PIL image.

    The gradient depends on the row only: one float32 value a row and colour, the
    same products the first (HxWx3) version computed, added to the noise one colour
    plane at a time over contiguous memory; the same pixels
    (tests/examples/test_generated_data_identity.py) for 60 % of the CPU.
    """
    base = np.array(_colour(rng, 60, 220), np.float32)
    yy = np.linspace(-1, 1, size, dtype=np.float32)
    rows = base[:, None] * (1 + rng.uniform(-0.15, 0.15) * yy)  # (colour, row), float32
    noise = np.random.default_rng(rng.getrandbits(32))
    planes = noise.normal(0, rng.uniform(3, 12), size=(size, size, 3)).transpose(2, 0, 1)
    planes += rows[:, :, None]
    np.clip(planes, 0, 255, out=planes)
    image = Image.fromarray(np.ascontiguousarray(planes.astype(np.uint8).transpose(1, 2, 0)))
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randint(0, 4)):  # clutter on the wall: faint lines and blobs
        shade = _shade(tuple(int(v) for v in base), rng.uniform(0.75, 1.25))
        if rng.random() < 0.5:
            x = rng.randint(0, size)
            draw.line([(x, 0), (x, size)], fill=shade, width=rng.randint(1, 2))
        else:
            x, y, r = rng.randint(0, size), rng.randint(0, size), rng.randint(2, 6)
            draw.ellipse([x - r, y - r, x + r, y + r], fill=shade)
    return image


def _draw_product(draw, kind, x0, y0, x1, y1, rng):
    """Draw one product in the box (x0, y0, x1, y1) (pixel edges); it fills the box."""
    w, h = x1 - x0, y1 - y0
    body = _colour(rng)
    dark = _shade(body, 0.55)
    if kind == "box":
        draw.rectangle([x0, y0, x1 - 1, y1 - 1], fill=body, outline=dark)
        py0, py1 = y0 + int(h * rng.uniform(0.25, 0.4)), y0 + int(h * rng.uniform(0.6, 0.75))
        draw.rectangle([x0 + max(1, w // 6), py0, x1 - 1 - max(1, w // 6), py1],
                       fill=_colour(rng, 200, 255))
        sy = y0 + max(1, h // 10)
        draw.rectangle([x0, sy, x1 - 1, sy + max(1, h // 12)], fill=_colour(rng))
    elif kind == "bottle":
        neck_w = max(2, int(w * 0.45))
        nx0 = x0 + (w - neck_w) // 2
        shoulder = y0 + int(h * 0.35)
        cap_h = max(2, int(h * 0.08))
        draw.rectangle([nx0, y0, nx0 + neck_w - 1, y0 + cap_h], fill=_colour(rng, 0, 255))
        draw.rectangle([nx0, y0 + cap_h, nx0 + neck_w - 1, shoulder], fill=body)
        draw.polygon([(nx0, shoulder), (nx0 + neck_w - 1, shoulder),
                      (x1 - 1, shoulder + max(2, h // 10)), (x0, shoulder + max(2, h // 10))],
                     fill=body)
        draw.rectangle([x0, shoulder + max(2, h // 10), x1 - 1, y1 - 1], fill=body)
        ly = y0 + int(h * 0.6)
        draw.rectangle([x0, ly, x1 - 1, ly + max(2, h // 6)], fill=_colour(rng, 180, 255))
    elif kind == "can":
        rim = (190, 190, 200)
        eh = max(2, h // 7)
        draw.rectangle([x0, y0 + eh // 2, x1 - 1, y1 - 1 - eh // 2], fill=body)
        draw.ellipse([x0, y1 - eh, x1 - 1, y1 - 1], fill=dark, outline=rim)
        draw.ellipse([x0, y0, x1 - 1, y0 + eh], fill=rim, outline=_shade(rim, 0.6))
        by = y0 + int(h * 0.4)
        draw.rectangle([x0, by, x1 - 1, by + max(2, h // 5)], fill=_colour(rng))
    else:  # jar
        lid_h = max(2, int(h * 0.2))
        r = max(2, w // 5)
        draw.rounded_rectangle([x0, y0 + lid_h - 1, x1 - 1, y1 - 1], radius=r, fill=body)
        inset = max(1, w // 10)
        draw.rectangle([x0 + inset, y0, x1 - 1 - inset, y0 + lid_h], fill=_colour(rng, 0, 90))
        draw.ellipse([x0 + w // 4, y0 + lid_h + (h - lid_h) // 4, x1 - 1 - w // 4,
                      y1 - 1 - (h - lid_h) // 4], fill=_colour(rng, 190, 255))


def render_image(rng, params):
    """One image and its objects: (PIL image, [(category_id, (x0, y0, x1, y1)), ...])."""
    size = params["image_size"]
    image = _wall(rng, size)
    draw = ImageDraw.Draw(image)
    objects = []
    shelves = rng.randint(params["min_shelves"], params["max_shelves"])
    row = size / shelves
    board_colour = _colour(rng, 40, 200)
    for s in range(shelves):
        board_h = max(3, int(row * rng.uniform(0.07, 0.11)))
        floor = int(round((s + 1) * row)) - board_h  # products stand on y = floor
        top = int(round(s * row)) + 2
        x = rng.randint(-int(row * 0.3), int(row * 0.15))
        while x < size:
            weights = params.get("class_weights")
            kind = CATEGORIES[rng.choices(range(len(CATEGORIES)), weights=weights)[0] if weights
                              else rng.randint(0, len(CATEGORIES) - 1)]["name"]
            room = floor - top
            h = max(8, int(room * rng.uniform(*HEIGHT[kind])))
            w = max(5, int(h * rng.uniform(*ASPECT[kind])))
            x0, x1, y0, y1 = x, x + w, floor - h, floor
            vis0, vis1 = max(0, x0), min(size, x1)
            if vis1 - vis0 >= 0.6 * w:
                _draw_product(draw, kind, x0, y0, x1, y1, rng)
                cat = next(c["id"] for c in CATEGORIES if c["name"] == kind)
                objects.append((cat, (vis0, y0, vis1, y1)))
            x = x1 + rng.randint(1, max(2, int(row * 0.35)))
            if rng.random() < 0.15:  # a gap on the shelf
                x += rng.randint(5, max(6, int(row * 0.6)))
        draw.rectangle([0, floor, size - 1, floor + board_h - 1], fill=board_colour,
                       outline=_shade(board_colour, 0.6))
        for _ in range(rng.randint(0, 3)):  # price tags on the board's edge
            tx = rng.randint(0, size - 8)
            tw = rng.randint(6, 12)
            draw.rectangle([tx, floor + 1, tx + tw, floor + board_h - 1],
                           fill=_colour(rng, 210, 255))
    # drawing order may let a board cover nothing: products end on the floor line
    return image, objects


GENERATOR = SyntheticCoco(describe="synthetic product shelves", categories=CATEGORIES,
                          defaults=DEFAULT_PARAMS, weeks=WEEKS, render_image=render_image,
                          error=DatasetError, png=synthetic.PNG_FAST)


def __getattr__(name):
    """ensure_dataset, write_week, load_split...: the kit's, under this module's name."""
    return synthetic.module_names(GENERATOR, name)


def main(argv=None):
    return GENERATOR.main(argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
