"""The examples' generators draw the same pixels and labels as the code the demo was measured on.

The demo's measured statistics (the gate's intervals, week 3's bad-labels effect)
rest on this data, so a change that makes generation cheaper (PNG encoder options,
vectorised drawing) must keep every decoded pixel and every annotation byte. The
digests below were computed from the generators as they were on 2026-11-27 (main at
4dc1045), before any such change; a PNG option may change the files' bytes, never
what they decode to. (Computed on this project's machines: x86-64, numpy 2.4.6, Pillow
13.0.0. numpy's normal() and libm's cos/sin feed the pixels, so another platform may
draw other data, and this test says so.)
"""

import hashlib
import importlib.util
import pathlib

import numpy as np
import pytest
from PIL import Image

from tests.fixtures.training import ROOT

# week -> sha256 over the week's annotation files and its images' decoded RGB pixels
PINNED = {
    "shapes_data": {
        1: "f4c9af0e3bfab2b1a5e56c6223e3ab51c9cf260df4d53dc54dc21a31cfa61fbd",
        2: "5f446f24733350a9c290b29c40f4e3d6b20e61adac970ab638af859a7dedee0a",
        3: "25cbcaaa0cea4488abcf7b230eb84907dfd31c7285466a2fad34d9ba3f8854f5",
    },
    "shelf_data": {
        1: "0c2427cc1ca0d6ee1ffa28e0ca5bf06f3f5fec5f1705cde62c147033f785e087",
        2: "e61f41b38fc9f0d8a4c3d39660804aea3fb449edacddfa6d0af95f1bc17a60cf",
    },
}
# the generated (--data-dir) layout's digest: the params and the annotation files
DATASET_DIGEST = {
    "shapes_data": "sha256:1422e423355af302a0b2efb2b99680d6b3f1d06ac4b99f662aff4837bcd65713",
    "shelf_data": "sha256:e41a64f993f1ea0cc84a8b0b815ad4f57a47f49eae409aa0a0d6f4322a7d05c0",
}
FOLDER = {"shapes_data": "shapes-detector", "shelf_data": "products-yolov3"}


def _generator(module):
    spec = importlib.util.spec_from_file_location(
        f"identity_{module}", ROOT / "examples" / FOLDER[module] / f"{module}.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)  # by file: sys.path keeps no second example's folder
    return gen


def content_digest(root: pathlib.Path) -> str:
    """sha256 over every annotation file's bytes and every PNG's decoded RGB pixels."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix == ".json" and path.parent.name == "annotations":
            h.update(path.relative_to(root).as_posix().encode())
            h.update(path.read_bytes())
        elif path.suffix == ".png":
            h.update(path.relative_to(root).as_posix().encode())
            with Image.open(path) as image:
                h.update(np.asarray(image.convert("RGB")).tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("module", sorted(PINNED))
def test_every_week_decodes_to_the_pinned_pixels_and_labels(tmp_path, module):
    """A small set (32 training, 4 val and 4 holdout images) of every week: week 2 and 3
    draw their new images with other seeds and class weights, week 3 swaps labels."""
    gen = _generator(module)
    params = dict(gen.DEFAULT_PARAMS, num_train=32, num_val=4)
    last = max(gen.WEEKS)
    gen.write_week(tmp_path / "store", last, params)  # writes the weeks before it first
    got = {week: content_digest(tmp_path / "store" / f"week-{week}") for week in gen.WEEKS}
    assert got == PINNED[module]
    assert gen.ensure_dataset(tmp_path / "plain", params) == DATASET_DIGEST[module]
