"""The rooms (the project's top-level packages), read from one place: `.importlinter`'s
`root_packages`, the list import-linter checks the contracts over. Every test or script
that walks the rooms takes them from here, so a new room is covered by the exit-code,
citation and dependency checks the day it joins the contracts."""

from __future__ import annotations

import configparser
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def read_rooms(root: pathlib.Path = ROOT) -> tuple[str, ...]:
    """`root_packages` of `root/.importlinter`, in the file's order."""
    config = configparser.ConfigParser()
    config.read_string((root / ".importlinter").read_text())
    return tuple(config["importlinter"]["root_packages"].split())


ROOMS = read_rooms()
