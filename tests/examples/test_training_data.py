"""The example's dataset generator: deterministic, idempotent, valid COCO, clear errors."""

import collections
import dataclasses
import hashlib
import importlib.util
import json
import subprocess
import sys

import pytest
from pycocotools.coco import COCO

from tests.fixtures.training import EXAMPLE, ROOT, example_module, training_env

shapes_data = example_module("shapes_data")

TINY = dict(shapes_data.DEFAULT_PARAMS, num_train=12, num_val=4)


def test_same_seed_same_digest_and_bytes(tmp_path):
    a = shapes_data.ensure_dataset(tmp_path / "a", TINY)
    b = shapes_data.ensure_dataset(tmp_path / "b", TINY)
    c = shapes_data.ensure_dataset(tmp_path / "c", dict(TINY, seed=TINY["seed"] + 1))
    assert a == b != c
    assert a.startswith("sha256:")
    for name in ("train.json", "val.json", "train/000003.png", "val/000001.png"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_second_call_is_a_no_op(tmp_path):
    first = shapes_data.ensure_dataset(tmp_path, TINY)
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.png")}
    assert shapes_data.ensure_dataset(tmp_path, TINY) == first
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.png")} == stamps


def test_damaged_annotations_are_regenerated(tmp_path):
    first = shapes_data.ensure_dataset(tmp_path, TINY)
    (tmp_path / "val.json").write_text("{}")
    assert shapes_data.existing_digest(tmp_path, TINY) is None
    assert shapes_data.ensure_dataset(tmp_path, TINY) == first


def test_coco_files_load_and_make_sense(tmp_path):
    shapes_data.ensure_dataset(tmp_path, TINY)
    for split, count in (("train", 12), ("val", 4)):
        coco = COCO(str(tmp_path / f"{split}.json"))
        assert len(coco.getImgIds()) == count
        assert sorted(coco.getCatIds()) == [1, 2, 3]
        assert [c["name"] for c in coco.loadCats([1, 2, 3])] == ["circle", "square", "triangle"]
        anns = coco.loadAnns(coco.getAnnIds())
        assert len(anns) >= 2 * count  # min_objects per image
        for ann in anns:
            x, y, w, h = ann["bbox"]
            assert ann["iscrowd"] == 0 and ann["area"] == w * h
            assert 0 <= x and 0 <= y and x + w <= 128 and y + h <= 128
            assert TINY["min_size"] <= max(w, h) <= TINY["max_size"]
        for img in coco.loadImgs(coco.getImgIds()):
            assert (tmp_path / img["file_name"]).is_file()
    marker = json.loads((tmp_path / "DATASET.json").read_text())
    assert marker["params"] == TINY


def test_uncreatable_or_missing_data_dir_is_one_line_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(shapes_data.DatasetError, match="cannot create data dir"):
        shapes_data.ensure_dataset(blocker / "data", TINY)
    proc = subprocess.run([sys.executable, str(EXAMPLE / "train.py"), "--output-dir",
                           str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "ck"),
                           "--data-dir", str(blocker / "data")],
                          capture_output=True, text=True, env=training_env(), timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    # train.py makes no data of its own (issue 29: the pipeline's prepare-data does)
    assert lines and "no dataset in --data-dir" in lines[0] and "shapes_data.py" in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("flags, message", [
    (["--batch-size", "0"], "--batch-size must be >= 1"),
    (["--lr", "-1"], "--lr must be > 0"),
    (["--subset", "-3"], "--subset must be >= 0"),
])
def test_bad_flags_are_one_line_errors(tmp_path, flags, message):
    proc = subprocess.run([sys.executable, str(EXAMPLE / "train.py"), "--output-dir",
                           str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "ck"),
                           *flags], capture_output=True, text=True, env=training_env(),
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: {message}, got ")
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("module", ["shapes_data", "shelf_data"])
def test_week_2_keeps_week_1s_bytes_retires_adds_and_shifts_the_class_mix(tmp_path, module):
    """Both examples' generators write weeks in the layout `mlops data snapshot` pins;
    week 1 is the dataset ensure_dataset makes, image for image (issue 29)."""

    folder = "products-yolov3" if module == "shelf_data" else "shapes-detector"
    spec = importlib.util.spec_from_file_location(
        f"week_{module}", ROOT / "examples" / folder / f"{module}.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)  # by file: sys.path keeps no second example's folder
    params = dict(gen.DEFAULT_PARAMS, num_train=64, num_val=4)
    week2 = gen.write_week(tmp_path / "store", 2, params)
    week1 = tmp_path / "store" / "week-1"
    gen.ensure_dataset(tmp_path / "plain", params)
    assert (week1 / "images" / "train" / "000005.png").read_bytes() == \
        (tmp_path / "plain" / "train" / "000005.png").read_bytes()

    def coco(root, split):
        return json.loads((root / "annotations" / f"{split}.json").read_text())
    one, two = coco(week1, "train"), coco(week2, "train")
    names1 = {i["file_name"] for i in one["images"]}
    names2 = {i["file_name"] for i in two["images"]}
    assert len(names1 - names2) == 2 and len(names2 - names1) == 10  # 64/32 and 5 x 64/32
    assert all(n.startswith("train/w2-") for n in names2 - names1)
    for name in names1 & names2:  # kept images: the same bytes (linked)
        assert (week1 / "images" / name).read_bytes() == (week2 / "images" / name).read_bytes()
    assert (week1 / "annotations" / "val.json").read_bytes() == \
        (week2 / "annotations" / "val.json").read_bytes()
    favoured = gen.WEEKS[2]["class_weights"].index(3) + 1
    new_ids = {i["id"] for i in two["images"] if i["file_name"] in names2 - names1}
    counts = collections.Counter(a["category_id"] for a in two["annotations"]
                                 if a["image_id"] in new_ids)
    assert counts.most_common(1)[0][0] == favoured
    assert gen.has_dataset(week2) and not gen.has_dataset(tmp_path / "nothing")
    assert gen.write_week(tmp_path / "store", 2, params) == week2  # idempotent


def test_week_3_swaps_a_share_of_its_new_labels_and_keeps_the_holdout(tmp_path):
    """The shapes generator's week 3 is a batch with bad labels: the same images as a
    clean week 3, but about `swap_share` of the new circle and square boxes carry the
    other class, no old box and no triangle changes; every week holds the same clean
    holdout split, none of its images in train or val (issue 30)."""
    spec = importlib.util.spec_from_file_location(
        "week3_shapes_data", ROOT / "examples" / "shapes-detector" / "shapes_data.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    params = dict(gen.DEFAULT_PARAMS, num_train=64, num_val=4)
    week3 = gen.write_week(tmp_path / "bad", 3, params)
    clean_weeks = {**gen.WEEKS, 3: {k: v for k, v in gen.WEEKS[3].items()
                                    if k not in ("swap", "swap_share")}}
    clean = dataclasses.replace(gen.GENERATOR, weeks=clean_weeks).write_week(
        tmp_path / "clean", 3, params)

    def coco(root, split):
        return json.loads((root / "annotations" / f"{split}.json").read_text())
    bad, good = coco(week3, "train"), coco(clean, "train")
    assert bad["images"] == good["images"] and len(bad["images"]) == 72  # week 2: 72; 16 out, 16 in
    new = {i["id"] for i in bad["images"] if i["file_name"].startswith("train/w3-")}
    assert len(new) == 16
    swapped = pairs = 0
    for b, g in zip(bad["annotations"], good["annotations"], strict=True):
        assert b["bbox"] == g["bbox"]
        if b["image_id"] not in new or g["category_id"] == 3:
            assert b["category_id"] == g["category_id"]
            continue
        pairs += 1
        if b["category_id"] != g["category_id"]:
            assert {b["category_id"], g["category_id"]} == {1, 2}
            swapped += 1
    assert pairs >= 20 and 0.5 < swapped / pairs < 0.95  # swap_share 0.75
    held = [(tmp_path / "bad" / f"week-{w}" / "annotations" / "holdout.json").read_bytes()
            for w in (1, 2, 3)]
    assert held[0] == held[1] == held[2]
    holdout = coco(week3, "holdout")
    assert len(holdout["images"]) == 4  # num_val images
    digest = {split: {hashlib.sha256((week3 / "images" / i["file_name"]).read_bytes()).digest()
                      for i in coco(week3, split)["images"]} for split in ("train", "val",
                                                                         "holdout")}
    assert not digest["holdout"] & (digest["train"] | digest["val"])
