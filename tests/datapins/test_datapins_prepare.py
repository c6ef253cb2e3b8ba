"""`mlops data prepare` (issue 29): exactly the pinned files, through a content-addressed
cache, verified and validated; a bad dataset is refused with the file and entry named.

Each refusal test breaks the dataset *before* the snapshot (so the lock pins the bad data
and prepare's validation, not the digest check, must catch it).
"""

import hashlib
import shutil
import threading

import pytest

from contracts.errors import ExitCode
from datapins.cache import Cache
from datapins.errors import DataDigestMismatch, DataError
from datapins.lock import write_lock
from datapins.prepare import prepare
from datapins.snapshot import snapshot
from datapins.sources import open_source
from mlops.cli import main
from tests.fixtures.data import edit_annotations, write_coco_dataset


def _pin(source):
    return snapshot(open_source(str(source)), "w48")


def _prepare(lock, tmp_path, source, dest="ws", **kw):
    return prepare(lock, tmp_path / dest, Cache(tmp_path / "cache"), open_source(str(source)),
                   **kw)


def test_prepare_lays_out_the_pinned_files_and_a_second_run_fetches_nothing(
        coco_dataset, tmp_path):
    lock = _pin(coco_dataset)
    first = _prepare(lock, tmp_path, coco_dataset, labels=["circle", "square", "triangle"])
    assert (first.files, first.fetched, first.hits) == (13, 13, 0)  # 3 annotation files + 10
    for split in lock.splits.values():
        for pin in [split.annotations, *split.images]:
            got = (tmp_path / "ws" / pin.path).read_bytes()
            assert hashlib.sha256(got).hexdigest() == pin.sha256
            entry = tmp_path / "cache" / "sha256" / pin.sha256[:2] / pin.sha256
            assert entry.is_file() and not entry.stat().st_mode & 0o222  # read-only
    shutil.rmtree(coco_dataset)  # the source is gone: a second prepare must not need it
    second = _prepare(lock, tmp_path, tmp_path, dest="ws2")
    assert (second.fetched, second.hits, second.bytes_fetched) == (0, 13, 0)
    assert _prepare(lock, tmp_path, tmp_path).skipped  # the same lock in the same workspace


def _refused(lock, tmp_path, source, **kw) -> str:
    with pytest.raises(DataError) as info:
        _prepare(lock, tmp_path, source, **kw)
    assert not (tmp_path / "ws").exists()  # nothing half-made
    return str(info.value)


def test_a_broken_image_is_refused(coco_dataset, tmp_path):
    broken = coco_dataset / "images" / "train" / "000003.png"
    data = bytearray(broken.read_bytes())
    data[60] ^= 0xFF  # one flipped byte in the pixel data: the PNG chunk's CRC no longer holds
    broken.write_bytes(bytes(data))
    message = _refused(_pin(coco_dataset), tmp_path, coco_dataset)
    assert "annotations/train.json: image id 3 (train/000003.png): does not decode" in message


def test_a_box_outside_its_image_is_refused(coco_dataset, tmp_path):
    edit_annotations(coco_dataset, "val",
                     lambda c: c["annotations"][1].update(bbox=[10, 10, 8, 4]))  # 18 > 16
    message = _refused(_pin(coco_dataset), tmp_path, coco_dataset)
    assert ("annotations/val.json: annotation id 14 (image id 7): box [10.0, 10.0, 8.0, 4.0] "
            "lies outside its image val/000007.png (16x16)") in message


def test_a_box_without_area_is_refused(coco_dataset, tmp_path):
    edit_annotations(coco_dataset, "train",
                     lambda c: c["annotations"][0].update(bbox=[1, 1, 0, 4]))
    message = _refused(_pin(coco_dataset), tmp_path, coco_dataset)
    assert "annotations/train.json: annotation id 1 (image id 1): box" in message
    assert "has no area" in message


def test_an_unknown_category_is_refused(coco_dataset, tmp_path):
    lock = _pin(coco_dataset)
    message = _refused(lock, tmp_path, coco_dataset, labels=["circle", "square"])
    assert ("annotations/train.json: category id 3: unknown category 'triangle' "
            "(the model's labels: circle, square)") in message
    edit_annotations(coco_dataset, "holdout",
                     lambda c: c["annotations"][0].update(category_id=99))
    message = _refused(_pin(coco_dataset), tmp_path, coco_dataset)
    assert "annotations/holdout.json: annotation id 17 (image id 9): unknown category id 99" \
        in message


def test_the_same_image_in_train_and_val_is_refused(coco_dataset, tmp_path):
    leaked = coco_dataset / "images" / "val" / "000007.png"
    shutil.copyfile(coco_dataset / "images" / "train" / "000002.png", leaked)
    message = _refused(_pin(coco_dataset), tmp_path, coco_dataset)
    assert ("annotations/train.json and annotations/val.json: images/train/000002.png and "
            "images/val/000007.png: the same image") in message


def test_duplicate_ids_are_refused(coco_dataset, tmp_path):
    def twice(coco):
        coco["annotations"][2]["id"] = coco["annotations"][1]["id"]
        coco["images"][1]["id"] = coco["images"][0]["id"]
    edit_annotations(coco_dataset, "train", twice)
    message = _refused(_pin(coco_dataset), tmp_path, coco_dataset)
    assert "annotations/train.json: image id 1: duplicate image id" in message
    assert "annotations/train.json: annotation id 2: duplicate annotation id" in message


def test_a_file_changed_under_its_pin_is_a_digest_mismatch(coco_dataset, tmp_path):
    lock = _pin(coco_dataset)
    changed = coco_dataset / "images" / "holdout" / "000010.png"
    changed.write_bytes(changed.read_bytes() + b"\0")
    with pytest.raises(DataDigestMismatch, match=r"/images/holdout/000010\.png: the pinned"):
        _prepare(lock, tmp_path, coco_dataset)
    pin = next(p for p in lock.splits["holdout"].images if p.path.endswith("000010.png"))
    assert not (tmp_path / "cache" / "sha256" / pin.sha256[:2] / pin.sha256).exists()
    assert not list((tmp_path / "cache").rglob("*.part"))


def test_a_workspace_with_other_files_is_refused(coco_dataset, tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "stale.json").write_text("{}")
    with pytest.raises(DataError, match="not empty"):
        _prepare(_pin(coco_dataset), tmp_path, coco_dataset)


def test_cli_prepare_exit_codes_and_one_line_errors(coco_dataset, tmp_path, capsys):
    edit_annotations(coco_dataset, "val", lambda c: c["annotations"][0].update(bbox=[9, 9, 9, 9]))
    lock_file = tmp_path / "data.lock.json"
    write_lock(_pin(coco_dataset), lock_file)
    argv = ["data", "prepare", str(lock_file), "--dest", str(tmp_path / "ws"),
            "--cache", str(tmp_path / "cache")]
    assert main(argv) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("error: dataset w48 (sha256:") and "Traceback" not in err
    assert "annotations/val.json: annotation id 13 (image id 7): box" in err
    edit_annotations(coco_dataset, "val", lambda c: c["annotations"][0].update(bbox=[1, 1, 2, 2]))
    write_lock(_pin(coco_dataset), lock_file)
    (coco_dataset / "images" / "train" / "000001.png").write_bytes(b"not the pinned bytes")
    assert main(argv) == 0  # the cache holds the pinned bytes from the refused run: no fetch
    argv[-1] = str(tmp_path / "cold-cache")
    argv[-3] = str(tmp_path / "ws2")
    assert main(argv) == ExitCode.DIGEST_MISMATCH
    (coco_dataset / "images" / "train" / "000001.png").unlink()
    assert main(argv) == ExitCode.NOT_FOUND
    assert "images/train/000001.png: no such file" in capsys.readouterr().err


def test_a_truncated_jpeg_passes_verify_and_is_refused_by_full_decode(tmp_path):
    """Pillow's `Image.verify()` checks a JPEG's header only (a PNG's chunk CRCs, above);
    `--full-decode` decodes every pixel and finds the missing half."""

    source = write_coco_dataset(tmp_path / "jpeg", {"train": 2, "val": 1}, side=64, fmt="JPEG")
    cut = source / "images" / "train" / "000002.jpg"
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    lock = _pin(source)
    assert _prepare(lock, tmp_path, source, dest="verified").fetched == 5
    message = _refused(lock, tmp_path, source, full_decode=True)
    assert "annotations/train.json: image id 2 (train/000002.jpg): does not decode: " \
           "OSError: image file is truncated" in message


def test_a_refusal_leaves_no_fetch_thread_behind(coco_dataset, tmp_path):
    """The fetch pool is shut down when prepare refuses, not when the garbage collector
    finalizes its generator: that happened in whichever thread allocated next, and when
    it was a thread being started, CPython 3.11 deadlocked joining the pool there (a
    whole test worker hung in the next `snapshot`, 2026-11-26)."""
    edit_annotations(coco_dataset, "train",
                     lambda c: c["annotations"][0].update(bbox=[1, 1, 0, 4]))
    lock = _pin(coco_dataset)
    before = set(threading.enumerate())
    with pytest.raises(DataError) as info:  # held: its traceback references prepare's frame
        _prepare(lock, tmp_path, coco_dataset, workers=4)
    left = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert left == [], f"threads alive after the refusal: {left} ({info.value})"
