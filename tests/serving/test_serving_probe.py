"""The probe set a version ships (`serving/probe.py`): what the server hands out, pure.

The route itself is exercised by the real servers of tests/local/test_platform_e2e.py (the
paired answers test) and tests/serving/test_serving_server.py (a version without a probe set)."""

import base64

from contracts.artifact import PROBE_DIR, PROBE_MAX_BYTES, PROBE_MAX_IMAGES
from serving.probe import load_probe_set


def test_images_in_name_order_as_base64_others_left_out(tmp_path):
    probe = tmp_path / PROBE_DIR
    probe.mkdir()
    (probe / "b.png").write_bytes(b"\x89PNG b")
    (probe / "a.JPG").write_bytes(b"jpeg a")
    (probe / "notes.txt").write_text("not an image")
    (probe / "sub").mkdir()
    (tmp_path / "outside.png").write_bytes(b"outside")
    (probe / "link.png").symlink_to(tmp_path / "outside.png")
    got = load_probe_set(tmp_path)
    assert [i["name"] for i in got] == ["a.JPG", "b.png"]
    assert base64.b64decode(got[1]["data"]) == b"\x89PNG b"


def test_none_shipped_is_empty(tmp_path):
    assert load_probe_set(tmp_path) == []
    (tmp_path / PROBE_DIR).write_text("a file, not a folder")
    assert load_probe_set(tmp_path) == []


def test_count_and_size_are_capped(tmp_path):
    probe = tmp_path / PROBE_DIR
    probe.mkdir()
    for i in range(PROBE_MAX_IMAGES + 5):
        (probe / f"{i:03d}.png").write_bytes(b"x" * 10)
    assert len(load_probe_set(tmp_path)) == PROBE_MAX_IMAGES
    for path in probe.iterdir():
        path.unlink()
    (probe / "a.png").write_bytes(b"x" * (PROBE_MAX_BYTES - 10))
    (probe / "b.png").write_bytes(b"x" * 20)  # would pass the total
    assert [i["name"] for i in load_probe_set(tmp_path)] == ["a.png"]
