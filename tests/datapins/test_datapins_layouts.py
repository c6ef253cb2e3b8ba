"""Dataset layouts teams already have, pinned where they lie (issue 44).

`mlops data snapshot` read only this project's layout (`annotations/<split>.json` +
`images/`): on COCO 2017's own release it found `annotations/instances_train2017.json`
and then looked for `images/...`, "no such file". Each test here builds a small real
dataset in tmp, laid out as its tool lays it out, pins it with the CLI and prepares it:
prepare must lay out what training reads (`annotations/<split>.json` as COCO and
`images/<file_name>`), whatever the source looked like, and the lock must say which
layout it came from. The layouts follow their owners' sources:
COCO's release (`annotations/instances_<split>2017.json`, `<split>2017/`), and
PaddleDetection's dataset YAMLs and readers (`PaddlePaddle/PaddleDetection`:
`configs/datasets/coco_detection.yml`, `configs/datasets/voc.yml`,
`ppdet/data/source/voc.py`: list lines `image xml` under `dataset_dir/image_dir`, a
`label_list`; VOC boxes become COCO's as `tools/x2coco.py` makes them).
"""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
import orjson
import pytest
from PIL import Image

from contracts.errors import ExitCode
from datapins.cache import Cache
from datapins.errors import DataError
from datapins.lock import dataset_digest, read_lock
from datapins.prepare import prepare
from datapins.roles import combine
from datapins.sources import open_source
from mlops.cli import main

SIDE = 32


def _image(path: pathlib.Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, "JPEG" if path.suffix == ".jpg" else "PNG")


def _coco(images: list[tuple[int, str]], classes=("cat", "dog")) -> dict:
    return {"images": [{"id": i, "file_name": name, "width": SIDE, "height": SIDE}
                       for i, name in images],
            "annotations": [{"id": n + 1, "image_id": i, "category_id": 1 + n % len(classes),
                             "bbox": [2, 2, 10, 12], "area": 120, "iscrowd": 0}
                            for n, (i, _) in enumerate(images)],
            "categories": [{"id": k + 1, "name": c} for k, c in enumerate(classes)]}


def coco2017(root: pathlib.Path, splits=(("train", 4), ("val", 2))) -> pathlib.Path:
    """COCO 2017's own layout, with the release's other annotation files beside."""
    (root / "annotations").mkdir(parents=True)
    image_id = 0
    for split, count in splits:
        names = []
        for _ in range(count):
            image_id += 1
            name = f"{image_id:012d}.jpg"
            _image(root / f"{split}2017" / name, image_id)
            names.append((image_id, name))
        (root / "annotations" / f"instances_{split}2017.json").write_text(
            json.dumps(_coco(names)))
        (root / "annotations" / f"captions_{split}2017.json").write_text(
            json.dumps({"images": [], "annotations": []}))  # not detection data: left alone
    return root


def _prepare(lock, tmp_path, source, **kw):
    return prepare(lock, tmp_path / "ws", Cache(tmp_path / "cache"), open_source(str(source)),
                   **kw)


def test_coco_2017s_own_layout_is_pinned_without_a_flag_and_prepared_for_training(
        tmp_path, capsys):
    source = coco2017(tmp_path / "coco")
    out = tmp_path / "coco.lock"
    assert main(["data", "snapshot", str(source), "--name", "coco", "--out", str(out)]) == 0
    assert "6 images (train 4, val 2); layout coco2017" in capsys.readouterr().out
    lock = read_lock(out)
    assert lock.layout == "coco2017" and sorted(lock.splits) == ["train", "val"]
    train = lock.splits["train"]
    assert train.image_root == "train2017"
    assert train.annotations.path == "annotations/instances_train2017.json"
    assert [p.path for p in train.images] == [f"train2017/{i:012d}.jpg" for i in range(1, 5)]
    assert train.classes == {"cat": 2, "dog": 2}

    report = _prepare(lock, tmp_path, source, labels=["cat", "dog"])
    assert (report.files, report.fetched) == (8, 8)
    ws = tmp_path / "ws"
    assert (ws / "annotations" / "train.json").read_bytes() == \
        (source / "annotations" / "instances_train2017.json").read_bytes()
    for split in ("train", "val"):
        coco = json.loads((ws / "annotations" / f"{split}.json").read_text())
        for image in coco["images"]:
            assert (ws / "images" / image["file_name"]).read_bytes() == \
                (source / f"{split}2017" / image["file_name"]).read_bytes()
    assert not (ws / "train2017").exists()
    assert not (ws / "annotations" / "captions_train2017.json").exists()


def test_a_coco_2017_pin_works_through_the_pipelines_roles(tmp_path):
    source = coco2017(tmp_path / "coco")
    assert main(["data", "snapshot", str(source), "--name", "c", "--out",
                 str(tmp_path / "c.lock")]) == 0
    lock = read_lock(tmp_path / "c.lock")
    both = combine({"train": ("c.lock", lock), "val": ("c.lock", lock)})
    assert both.digest == lock.digest and both.splits["val"].image_root == "val2017"
    _prepare(both, tmp_path, source)
    assert (tmp_path / "ws" / "images" / "000000000005.jpg").is_file()


def test_two_splits_that_would_put_different_images_at_one_path_are_refused(tmp_path):
    source = coco2017(tmp_path / "coco", splits=(("train", 1),))
    (source / "val2017").mkdir()
    _image(source / "val2017" / "000000000001.jpg", 99)  # same name, other pixels
    (source / "annotations" / "instances_val2017.json").write_text(
        json.dumps(_coco([(1, "000000000001.jpg")])))
    assert main(["data", "snapshot", str(source), "--name", "c", "--out",
                 str(tmp_path / "c.lock")]) == 0
    with pytest.raises(DataError, match=r"splits train and val both put a file at "
                                        r"images/000000000001\.jpg"):
        _prepare(read_lock(tmp_path / "c.lock"), tmp_path, source)
    assert not (tmp_path / "ws").exists()


def test_a_layout_it_cannot_read_gets_one_message_naming_those_it_can(tmp_path, capsys):
    yolo = tmp_path / "yolo"
    _image(yolo / "images" / "train" / "a.jpg", 1)
    (yolo / "labels" / "train").mkdir(parents=True)
    (yolo / "labels" / "train" / "a.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    code = main(["data", "snapshot", str(yolo), "--name", "y", "--out", str(tmp_path / "y.lock")])
    err = capsys.readouterr().err.strip()
    assert code == ExitCode.BAD_INPUT and len(err.splitlines()) == 1
    for layout in ("annotations/<split>.json + images/<file_name>",
                   "annotations/instances_<split>2017.json + <split>2017/<file_name>",
                   "--ppdet-config FILE", "COCODataSet or VOCDataSet"):
        assert layout in err


COCO_YAML = """\
metric: COCO
num_classes: 2

TrainDataset:
  name: COCODataSet
  image_dir: train2017
  anno_path: annotations/instances_train2017.json
  dataset_dir: dataset/coco
  data_fields: ['image', 'gt_bbox', 'gt_class', 'is_crowd']

EvalDataset:
  name: COCODataSet
  image_dir: val2017
  anno_path: annotations/instances_val2017.json
  dataset_dir: dataset/coco
  allow_empty: true

TestDataset:
  name: ImageFolder
  anno_path: annotations/instances_val2017.json
  dataset_dir: dataset/coco
"""


def test_a_paddledetection_coco_yaml_is_pinned_from_its_dataset_dir(tmp_path, monkeypatch):
    """As PaddleDetection's tools run, from the repo root: `dataset_dir` is relative to it.
    The model's config includes the dataset YAML through `_BASE_` and overrides nothing of
    it; an older-style `!COCODataSet` tag reads the same."""
    coco2017(tmp_path / "dataset" / "coco")
    (tmp_path / "configs" / "datasets").mkdir(parents=True)
    (tmp_path / "configs" / "datasets" / "coco_detection.yml").write_text(
        COCO_YAML.replace("TrainDataset:\n  name: COCODataSet\n", "TrainDataset: !COCODataSet\n"))
    (tmp_path / "configs" / "yolov3").mkdir()
    (tmp_path / "configs" / "yolov3" / "model.yml").write_text(
        "_BASE_: ['../datasets/coco_detection.yml']\nepoch: 270\nLearningRate: !Piecewise\n"
        "  gamma: 0.1\n")
    monkeypatch.chdir(tmp_path)
    assert main(["data", "snapshot", "--ppdet-config", "configs/yolov3/model.yml",
                 "--name", "p", "--out", "p.lock"]) == 0
    lock = read_lock(tmp_path / "p.lock")
    assert lock.layout == "ppdet-coco"
    assert {n: s.image_root for n, s in lock.splits.items()} == {"train": "train2017",
                                                                "val": "val2017"}
    assert lock.source == (tmp_path / "dataset" / "coco").as_uri()
    # the same data pinned without the config: the same digest (the same bytes and paths)
    assert main(["data", "snapshot", "dataset/coco", "--name", "c", "--out", "c.lock"]) == 0
    assert read_lock(tmp_path / "c.lock").digest == lock.digest
    _prepare(lock, tmp_path, tmp_path / "dataset" / "coco", labels=["cat", "dog"])
    assert len(list((tmp_path / "ws" / "images").iterdir())) == 6


def _xml(path: pathlib.Path, objects: list[tuple[str, tuple[int, int, int, int]]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    boxes = "".join(
        f"<object><name>{n}</name><difficult>0</difficult><bndbox><xmin>{a}</xmin>"
        f"<ymin>{b}</ymin><xmax>{c}</xmax><ymax>{d}</ymax></bndbox></object>"
        for n, (a, b, c, d) in objects)
    path.write_text(f"<annotation><folder>VOC2007</folder><filename>{path.stem}.jpg</filename>"
                    f"<size><width>{SIDE}</width><height>{SIDE}</height><depth>3</depth></size>"
                    f"{boxes}</annotation>")


def voc(root: pathlib.Path, bad_box: bool = False, unknown: bool = False) -> pathlib.Path:
    """PaddleDetection's VOC layout (`dataset/voc`): list files of `image xml` lines."""
    lines = {"trainval.txt": [], "test.txt": []}
    for n in range(6):
        stem = f"{n:06d}"
        _image(root / "VOCdevkit/VOC2007/JPEGImages" / f"{stem}.jpg", n)
        objects = [("bus" if n % 2 else "person", (2, 3, 20, 30))]
        if n == 1 and bad_box:
            objects.append(("person", (10, 10, 40, 20)))  # past the 32-pixel edge
        if n == 2 and unknown:
            objects.append(("zebra", (1, 1, 5, 5)))
        _xml(root / "VOCdevkit/VOC2007/Annotations" / f"{stem}.xml", objects)
        lines["trainval.txt" if n < 4 else "test.txt"].append(
            f"VOCdevkit/VOC2007/JPEGImages/{stem}.jpg VOCdevkit/VOC2007/Annotations/{stem}.xml")
    for name, entries in lines.items():
        (root / name).write_text("\n".join(entries) + "\n")
    (root / "label_list.txt").write_text("person\nbus\n")
    return root


VOC_YAML = """\
metric: VOC
map_type: 11point
num_classes: 2

TrainDataset:
  name: VOCDataSet
  dataset_dir: dataset/voc
  anno_path: trainval.txt
  label_list: label_list.txt
  data_fields: ['image', 'gt_bbox', 'gt_class', 'difficult']

EvalDataset:
  name: VOCDataSet
  dataset_dir: dataset/voc
  anno_path: test.txt
  label_list: label_list.txt
  data_fields: ['image', 'gt_bbox', 'gt_class', 'difficult']

TestDataset:
  name: ImageFolder
  anno_path: dataset/voc/label_list.txt
"""


def _voc_pin(tmp_path, monkeypatch, **kw):
    voc(tmp_path / "dataset" / "voc", **kw)
    (tmp_path / "voc.yml").write_text(VOC_YAML)
    monkeypatch.chdir(tmp_path)
    assert main(["data", "snapshot", "--ppdet-config", "voc.yml", "--name", "v",
                 "--out", "v.lock"]) == 0
    return read_lock(tmp_path / "v.lock")


def test_a_paddledetection_voc_yaml_is_pinned_and_prepared_as_coco(tmp_path, monkeypatch):
    lock = _voc_pin(tmp_path, monkeypatch)
    assert lock.layout == "ppdet-voc"
    train = lock.splits["train"]
    assert (train.format, train.image_root, train.annotations.path) == ("voc", "", "trainval.txt")
    assert len(train.images) == 4 and len(lock.splits["val"].images) == 2
    assert sorted(f.path for f in train.files)[-1] == "label_list.txt"  # and the 4 XML files
    assert len(train.files) == 5
    assert train.classes == {"person": 2, "bus": 2}
    # the digest covers the XML files and the format: the canonical form of the lock file
    plain = {n: s.model_dump(exclude_defaults=True) for n, s in lock.splits.items()}
    whole = orjson.dumps(plain, option=orjson.OPT_SORT_KEYS)
    assert lock.digest == dataset_digest(lock.splits) == \
        "sha256:" + hashlib.sha256(whole).hexdigest()

    _prepare(lock, tmp_path, tmp_path / "dataset" / "voc", labels=["person", "bus"])
    coco = json.loads((tmp_path / "ws" / "annotations" / "train.json").read_text())
    assert coco["categories"] == [{"id": 1, "name": "person", "supercategory": "none"},
                                  {"id": 2, "name": "bus", "supercategory": "none"}]
    assert [i["file_name"] for i in coco["images"]][:1] == \
        ["VOCdevkit/VOC2007/JPEGImages/000000.jpg"]
    assert coco["annotations"][0]["bbox"] == [2.0, 3.0, 18.0, 27.0]  # x, y, w, h from corners
    assert coco["annotations"][1]["category_id"] == 2  # 000001: a bus
    image = tmp_path / "ws" / "images" / coco["images"][0]["file_name"]
    assert image.read_bytes() == (tmp_path / "dataset/voc" / coco["images"][0]["file_name"]
                                  ).read_bytes()


def test_a_bad_voc_dataset_is_refused_naming_the_xml_and_the_box(tmp_path, monkeypatch):
    lock = _voc_pin(tmp_path, monkeypatch, bad_box=True, unknown=True)
    with pytest.raises(DataError) as err:
        _prepare(lock, tmp_path, tmp_path / "dataset" / "voc")
    text = str(err.value)
    assert "VOCdevkit/VOC2007/Annotations/000002.xml: object 1: class 'zebra' is not in the " \
           "label list (person, bus)" in text
    assert "trainval.txt: annotation id 3 (image id 2): box" in text and "lies outside" in text
    assert not (tmp_path / "ws").exists()


def test_an_xml_changed_after_the_pin_is_caught(tmp_path, monkeypatch):
    _voc_pin(tmp_path, monkeypatch)
    _xml(tmp_path / "dataset/voc/VOCdevkit/VOC2007/Annotations/000000.xml",
         [("bus", (2, 3, 20, 30))])  # a relabelled box: the labels are data too
    assert main(["data", "prepare", "v.lock", "--dest", "ws", "--cache", "cache"]) == \
        ExitCode.DIGEST_MISMATCH


@pytest.mark.parametrize("text, complaint", [
    ("TrainDataset:\n  name: MOTDataSet\n  anno_path: x\n", "choose COCODataSet or VOCDataSet"),
    ("TrainDataset:\n  name: COCODataSet\n", "anno_path is missing"),
    ("TrainDataset:\n  name: COCODataSet\n  anno_path: /etc/x.json\n", "inside dataset_dir"),
    ("metric: COCO\n", "no TrainDataset or EvalDataset"),
    ("TrainDataset: {name: COCODataSet, anno_path: a.json, dataset_dir: a}\n"
     "EvalDataset: {name: COCODataSet, anno_path: b.json, dataset_dir: b}\n", "different roots"),
    ("_BASE_: ['missing.yml']\n", "missing.yml: no such PaddleDetection config"),
])
def test_a_config_it_cannot_use_is_refused_naming_the_field(tmp_path, capsys, text, complaint):
    (tmp_path / "c.yml").write_text(text)
    code = main(["data", "snapshot", str(tmp_path), "--ppdet-config", str(tmp_path / "c.yml"),
                 "--name", "x", "--out", str(tmp_path / "x.lock")])
    assert code == ExitCode.BAD_INPUT and complaint in capsys.readouterr().err


def test_the_lock_of_this_projects_layout_is_written_as_before(coco_dataset, tmp_path):
    """No `layout`, `image_root`, `format` or `files` key unless a split needs it: older
    locks keep their bytes and digests."""
    assert main(["data", "snapshot", str(coco_dataset), "--name", "w", "--out",
                 str(tmp_path / "w.lock")]) == 0
    text = (tmp_path / "w.lock").read_text()
    for key in ('"layout"', '"image_root"', '"format": "', '"files"'):
        assert key not in text


def test_a_prepared_voc_split_is_verified_again_as_placed(tmp_path, monkeypatch):
    """Issue 41, finding 5, for a VOC pin: its COCO file is made, not linked, so it is
    made again from the cache's pinned XML files and compared; without that cache it
    is named as not checked, never passed silently. Images are checked by their pins."""
    from datapins.errors import DataDigestMismatch
    from datapins.prepare import verify_placed

    lock = _voc_pin(tmp_path, monkeypatch)
    _prepare(lock, tmp_path, tmp_path / "dataset" / "voc", labels=["person", "bus"])
    ws, cache = tmp_path / "ws", Cache(tmp_path / "cache")
    assert verify_placed(lock, ws, ["val"], cache) == []
    val = ws / "annotations" / "val.json"
    coco = json.loads(val.read_text())
    coco["annotations"][0]["bbox"] = [0.0, 0.0, 1.0, 1.0]
    val.unlink()  # a hard link of nothing here, but replaced as training would
    val.write_text(json.dumps(coco))
    with pytest.raises(DataDigestMismatch, match=r"annotations/val\.json: sha256"):
        verify_placed(lock, ws, ["val"], cache)
    notes = verify_placed(lock, ws, ["train"], Cache(tmp_path / "elsewhere"))
    assert len(notes) == 1 and "train.json: made from VOC files" in notes[0]
    image = next((ws / "images").rglob("*.jpg"))
    image.unlink()
    image.write_bytes(b"not the pinned image")
    with pytest.raises(DataDigestMismatch, match=r"images/.*\.jpg: sha256"):
        verify_placed(lock, ws, ["train", "val"], cache)
