"""cogs.files: the one atomic write every room uses (tmp beside the target, then rename)."""

import pathlib
import socket

import pytest

from cogs.files import atomic_write_json, atomic_write_text, read_json, replacing
from cogs.ports import free_port


def test_a_write_replaces_the_file_and_leaves_no_temp_file(tmp_path: pathlib.Path):
    target = tmp_path / "deep" / "status.json"
    atomic_write_json(target, {"b": 1, "a": [2]})
    atomic_write_text(target, '{"a": 3}\n')
    assert read_json(target) == {"a": 3}
    assert [p.name for p in target.parent.iterdir()] == ["status.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temp_file(tmp_path: pathlib.Path):
    target = tmp_path / "model.yaml"
    target.write_text("old\n")
    with pytest.raises(RuntimeError, match="half written"):
        with replacing(target) as tmp:
            tmp.write_text("new, but ")
            raise RuntimeError("half written")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["model.yaml"]


def test_the_temp_file_sits_beside_the_target_so_the_rename_stays_on_one_filesystem(
        tmp_path: pathlib.Path):
    target = tmp_path / "canary.png"
    with replacing(target) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".canary.png.")
        tmp.write_bytes(b"\x89PNG")
    assert target.read_bytes() == b"\x89PNG"


def test_read_json_returns_the_default_for_a_missing_or_broken_file(tmp_path: pathlib.Path):
    (tmp_path / "broken.json").write_text("{")
    assert read_json(tmp_path / "broken.json", {}) == {}
    assert read_json(tmp_path / "missing.json") is None


def test_free_port_binds_on_the_loopback_address_it_is_asked_for():
    port = free_port("127.0.0.2")
    with socket.socket() as sock:
        sock.bind(("127.0.0.2", port))  # free there: a worker's PADDLE_PORT on its own pod IP
