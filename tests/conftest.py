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


def pytest_collection_modifyitems(config, items):
    """Modules with slow tests first (the order otherwise is kept).

    `scripts/test.sh` runs the suite on two pytest-xdist workers with
    `--dist loadfile --no-loadscope-reorder`: a module runs whole on one
    worker, and modules are handed out in collection order. The demo's
    end-to-end module alone takes most of the run, so it must start first,
    not after the fast modules.
    """
    slow_modules = {item.path for item in items if item.get_closest_marker("slow")}
    # Whole modules move, so a module-scoped fixture is still set up once.
    items.sort(key=lambda item: item.path not in slow_modules)
