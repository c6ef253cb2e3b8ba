"""Shared fixtures, one plugin module per room under tests/fixtures/.

Every module there is loaded; each room owns its own module, so rooms add
fixtures without editing a shared file.
"""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest_plugins = sorted(
    f"tests.fixtures.{p.stem}"
    for p in (ROOT / "tests" / "fixtures").glob("*.py")
    if p.stem != "__init__"
)
