"""`mlops data snapshot` (issue 29): a COCO dataset pinned by content in a lock file."""

import hashlib
import json
import shutil

import orjson
import pytest

from contracts.errors import ExitCode
from datapins.errors import DataError
from datapins.lock import dataset_digest, dumps, read_lock, write_lock
from datapins.snapshot import snapshot
from datapins.sources import open_source
from mlops.cli import main
from tests.fixtures.data import edit_annotations


def test_snapshot_pins_every_split_image_and_class(coco_dataset):
    lock = snapshot(open_source(str(coco_dataset)), "shapes-w48")
    assert sorted(lock.splits) == ["holdout", "train", "val"]
    train = lock.splits["train"]
    assert len(train.images) == 6 and train.annotations.path == "annotations/train.json"
    assert sum(train.classes.values()) == 12  # two boxes per image
    assert set(train.classes) == {"circle", "square", "triangle"}
    first = train.images[0]
    data = (coco_dataset / first.path).read_bytes()
    assert first.size == len(data)
    assert first.sha256 == hashlib.sha256(data).hexdigest()
    assert lock.source == coco_dataset.resolve().as_uri()


def test_the_digest_is_the_content_not_the_place_or_name(coco_dataset, tmp_path):
    a = snapshot(open_source(str(coco_dataset)), "one")
    moved = shutil.copytree(coco_dataset, tmp_path / "nas" / "shapes")
    b = snapshot(open_source(moved.as_uri()), "two")
    assert a.digest == b.digest and a.source != b.source
    img = moved / b.splits["val"].images[0].path
    img.write_bytes(img.read_bytes() + b"\0")  # one byte more in one image
    c = snapshot(open_source(str(moved)), "two")
    assert c.digest != b.digest


def test_the_lock_file_round_trips_one_image_per_line(coco_dataset, tmp_path):
    lock = snapshot(open_source(str(coco_dataset)), "shapes-w48")
    path = tmp_path / "data.lock.json"
    write_lock(lock, path)
    assert read_lock(path) == lock
    text = path.read_text()
    assert json.loads(text)["format"] == 1
    image_lines = [line for line in text.splitlines() if '"path":"images/' in line]
    assert len(image_lines) == 10  # 6 + 2 + 2, each on its own line for a readable git diff
    assert text == dumps(lock)


def test_a_hand_edited_lock_is_refused_naming_the_file(coco_dataset, tmp_path):
    lock = snapshot(open_source(str(coco_dataset)), "shapes-w48")
    path = tmp_path / "data.lock.json"
    write_lock(lock, path)
    pin = lock.splits["train"].images[0]
    path.write_text(path.read_text().replace(pin.sha256, "0" * 64))
    with pytest.raises(DataError, match=r"data\.lock\.json: digest .* edited by hand"):
        read_lock(path)
    path.write_text(path.read_text().replace('"format": 1', '"format": 2'))
    with pytest.raises(DataError, match=r"data\.lock\.json: format"):
        read_lock(path)


def test_a_file_name_leaving_images_is_refused(coco_dataset):
    edit_annotations(coco_dataset, "val",
                     lambda c: c["images"][0].update(file_name="../../etc/passwd"))
    with pytest.raises(DataError, match=r"annotations/val\.json: image id \d+: file_name"):
        snapshot(open_source(str(coco_dataset)), "bad")


def test_a_malformed_annotation_file_names_the_entry(coco_dataset):
    edit_annotations(coco_dataset, "train", lambda c: c["annotations"][3].update(bbox=[1, 2]))
    where = r"annotations/train\.json: annotations\[3\] \(id 4\)\.bbox"
    with pytest.raises(DataError, match=where):
        snapshot(open_source(str(coco_dataset)), "bad")


def test_cli_snapshot_writes_the_lock_and_refuses_a_non_dataset(coco_dataset, tmp_path, capsys):
    out = tmp_path / "data.lock.json"
    assert main(["data", "snapshot", str(coco_dataset), "--name", "w48", "--out", str(out)]) == 0
    assert "10 images (holdout 2, train 6, val 2)" in capsys.readouterr().out
    assert read_lock(out).name == "w48"
    empty = tmp_path / "empty"
    empty.mkdir()
    code = main(["data", "snapshot", str(empty), "--name", "w48", "--out", str(out)])
    err = capsys.readouterr().err
    # one message naming every layout it can read (tests/datapins/test_datapins_layouts.py)
    assert code == ExitCode.BAD_INPUT and "no dataset found" in err
    assert "annotations/<split>.json" in err and "--ppdet-config" in err
    code = main(["data", "snapshot", "ftp://host/x", "--name", "w48", "--out", str(out)])
    assert code == ExitCode.BAD_INPUT and "unknown scheme 'ftp'" in capsys.readouterr().err


def test_the_digest_is_sha256_of_the_sorted_key_json_of_the_splits(coco_dataset):
    """The streamed serialisation is the plain one (each split without the keys at their
    defaults: `image_root`, `format`, `files` of other layouts), byte for byte: the format's
    definition. Other layouts' locks: tests/datapins/test_datapins_layouts.py."""

    lock = snapshot(open_source(str(coco_dataset)), "w48")
    plain = {name: split.model_dump(exclude_defaults=True) for name, split in lock.splits.items()}
    whole = orjson.dumps(plain, option=orjson.OPT_SORT_KEYS)
    assert dataset_digest(lock.splits) == "sha256:" + hashlib.sha256(whole).hexdigest()
    assert lock.digest == dataset_digest(lock.splits)
