"""Shared fixtures, one plugin module per room (each owned by that room's tests)."""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest_plugins = [
    "tests.fixtures.common",
    "tests.fixtures.training",
]
