"""Shared fixtures, one plugin module per room under tests/fixtures/.

Every module there is loaded; each room owns its own module, so rooms add
fixtures without editing a shared file.
"""

import os
import pathlib
import sys
import tempfile

import pytest

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


#: How much lower the priority of everything but the critical path is, under xdist
#: (`MLOPS_TEST_NICE`; 0 turns it off).
NICE = int(os.environ.get("MLOPS_TEST_NICE", "5"))
_reniced = False


def _lower_priority(nice: int) -> None:
    """Lower this worker's CPU priority by `nice`, what its tests start included.

    Linux schedules by autogroup (one per session, `sched_autogroup_enabled`): a
    process's nice only weighs against its own session's, and the demo's training ranks,
    pipeline runs and servers each run in a session of their own. So the worker leaves
    its session for a new one (it never leaves the caller's shell at a lower priority)
    and lowers that session's autogroup nice (raising it needs no privilege); the
    process nice covers kernels without autogroups."""
    try:
        os.setsid()
    except OSError:  # already a session leader
        pass
    try:
        pathlib.Path("/proc/self/autogroup").write_text(str(nice))
    except OSError:  # no autogroups: the process nice below is what counts
        pass
    os.nice(nice)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """The demo's module (`critical_path`) sets the suite's length: a worker lowers its
    priority at its first test outside it, so the demo trains at nearly the speed it has
    alone while the other workers use what it leaves. docs/development.md, "Tests", says why.
    Only under xdist: a developer running a module alone keeps a normal priority."""
    global _reniced
    if (_reniced or NICE <= 0 or not os.environ.get("PYTEST_XDIST_WORKER")
            or item.get_closest_marker("critical_path")):
        return
    _lower_priority(NICE)
    _reniced = True


SYSTEM_TMP_ENV = "MLOPS_TEST_SYSTEM_TMP"


@pytest.fixture(scope="session", autouse=True)
def _private_tmpdir_per_worker(tmp_path_factory):
    """Under pytest-xdist, each worker's temporary files go to a directory of its own.

    Two workers share the machine's /tmp; the demo's end-to-end test checks
    that the demo writes nothing outside its work dir, so a temporary clone of
    a test running on the other worker (or left by a process a test killed)
    must not land there. The machine's own temp dir is kept in
    `$MLOPS_TEST_SYSTEM_TMP` for that test, which runs the demo against it.
    """
    os.environ.setdefault(SYSTEM_TMP_ENV, tempfile.gettempdir())
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    private = tmp_path_factory.mktemp("tmpdir", numbered=False)
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(private)
    tempfile.tempdir = None  # recomputed from $TMPDIR on next use
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old
        tempfile.tempdir = None
