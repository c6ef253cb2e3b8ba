"""The rooms' doors, written in .importlinter, are checked, not just described."""

import configparser
import pathlib
import re
import shutil
import subprocess

import setuptools
import tomllib

from tests.rooms import ROOMS

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    exe = shutil.which("lint-imports")
    assert exe, "import-linter is a test dependency (pip install -e .[test])"
    proc = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "broken" in proc.stdout and "0 broken" in proc.stdout


def test_every_package_is_a_room_and_every_tool_walks_the_same_rooms():
    """The rooms are listed once, in `.importlinter`'s root_packages (tests/rooms.py reads
    them). The three tests that walked the rooms kept their own tuples, and all three
    missed modelkit; here the list is checked against the checkout's packages (the rule
    scripts/setup.sh and pyproject's packages.find use), the rooms contract and mypy's
    files."""
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert set(ROOMS) == on_disk, "a package missing from .importlinter's root_packages"
    assert len(ROOMS) == len(set(ROOMS))
    config = configparser.ConfigParser()
    config.read_string((ROOT / ".importlinter").read_text())
    layered = set(re.split(r"[\s|]+", config["importlinter:contract:rooms"]["layers"].strip()))
    assert layered == set(ROOMS), "each room has its place in the rooms contract"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert set(pyproject["tool"]["mypy"]["files"]) == set(ROOMS)
    find = pyproject["tool"]["setuptools"]["packages"]["find"]
    assert find.get("namespaces") is False  # else every data directory is a package too
    shipped = {name.split(".")[0] for name in setuptools.find_packages(
        str(ROOT), exclude=find.get("exclude", ()), include=find.get("include", ("*",)))}
    assert shipped == set(ROOMS), "the wheel ships every room and nothing else"
    # (the Dockerfile's COPY lines: tests/images/test_images_dockerfiles.py)
