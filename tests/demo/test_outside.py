"""tests/demo/outside.py: a command's writes outside its work dir, seen in overlays of a
mount namespace of its own, with the real unshare, mount and overlayfs on small
programs (the demo's end-to-end test relies on them)."""

import os
import pathlib
import sys
import textwrap
import time

import pytest

from tests.demo import outside

#: Everything a command may do to a root, each kind once: the expected lines below.
TREE = textwrap.dedent("""
    import os, pathlib, socket, sys, time
    root, work = map(pathlib.Path, sys.argv[1:3])
    (work / "result").write_text("kept")              # the work dir: the real one
    (root / "new").write_text("abc")
    with open(root / "existing", "a") as f:            # modified
        f.write("more")
    os.unlink(root / "doomed")                          # removed
    with open(root / "lock", "r+"):                     # opened for writing, unchanged
        pass
    (root / "tmp.x").write_text("x"); os.unlink(root / "tmp.x")   # transient
    pathlib.Path("at-start").write_text("s")            # relative to the cwd it started in
    (root / "empty" / "dirs").mkdir(parents=True)         # not counted
    (root / "made" / "deep").mkdir(parents=True)
    (root / "made" / "deep" / "f").write_text("f")
    (root / "dir" / "inner").write_text("changed")      # in an existing directory
    os.chdir(root / "dir"); os.mkdir("relative")         # relative paths
    pathlib.Path("relative/f").write_text("r")
    (root / "dir" / "__pycache__").mkdir(); (root / "dir" / "__pycache__" / "m.pyc").write_text("")
    s = socket.socket(socket.AF_UNIX); s.bind(str(root / "sock")); s.close()
    print("done", flush=True)
    while not (work / "go").exists():                   # a write from outside meanwhile
        time.sleep(0.02)
""")


@pytest.fixture
def roots(tmp_path):
    root = tmp_path / "root"
    (root / "dir").mkdir(parents=True)
    for name, text in (("existing", "x"), ("doomed", "d"), ("lock", "l"), ("dir/inner", "i")):
        (root / name).write_text(text)
    work = root / "work"
    work.mkdir()
    return root, work


def run(tmp_path, root, work, code, *args):
    isolated = outside.Isolated([root], work, [sys.executable, "-c", code, *args], root,
                                dict(os.environ), tmp_path / "out", tmp_path / "err",
                                tmp_path / "messages")
    why = isolated.started()
    assert why is None, why  # the demo's test needs it: a failure, not a skip
    return isolated


def test_each_change_under_a_root_is_seen_and_nothing_else(tmp_path, roots):
    root, work = roots
    isolated = run(tmp_path, root, work, TREE, str(root), str(work))
    try:
        for _ in range(1200):  # until the command has made its changes
            if (tmp_path / "out").read_text() == "done\n":
                break
            time.sleep(0.05)
        # another process (this one) writes under the root meanwhile: not the command's
        (root / "by-someone-else").write_text("y")
        (root / "existing").touch()
        (work / "go").touch()
        assert isolated.wait_command(timeout=60) == 0, (tmp_path / "err").read_text()
        assert isolated.left_behind() == []
        found = sorted(line.split(" (")[0] for line in isolated.changes())
    finally:
        isolated.stop()
    assert found == [
        f"{root}/at-start: new",
        f"{root}/dir/inner: modified",
        f"{root}/dir/relative: new directory",
        f"{root}/doomed: removed",
        f"{root}/existing: modified",
        f"{root}/made: new directory",
        f"{root}/new: new",
        f"{root}/sock: new",
    ]
    # the work dir was the real one; the rest never reached the real root
    assert (work / "result").read_text() == "kept"
    assert not (root / "new").exists() and (root / "doomed").exists()


def test_the_command_ends_before_its_namespace_and_what_it_leaves_running_is_named(
        tmp_path, roots):
    root, work = roots
    daemon = ("import subprocess, sys\n"
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
              " start_new_session=True)\n"
              "print('started'); sys.exit(3)\n")
    isolated = run(tmp_path, root, work, daemon)
    try:
        assert isolated.wait_command(timeout=60) == 3
        assert (tmp_path / "out").read_text() == "started\n"
        left = isolated.left_behind()
        assert len(left) == 1 and "time.sleep(600)" in outside.command_line(left[0])
    finally:
        isolated.stop()
    assert not pathlib.Path(f"/proc/{left[0]}").exists() or "Z" in pathlib.Path(
        f"/proc/{left[0]}/stat").read_text().split(")")[1][:3]


def test_nested_roots_share_one_overlay(tmp_path):
    a = tmp_path / "a"
    (a / "b").mkdir(parents=True)
    assert outside.top_roots([a / "b", a, tmp_path / "c"]) == [a, tmp_path / "c"]
    with pytest.raises(ValueError, match="cannot watch /"):
        outside.top_roots([pathlib.Path("/")])
