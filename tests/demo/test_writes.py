"""tests/demo/writes.py: a process tree's writes read from its system calls, with the
real strace on small programs (the demo's end-to-end test relies on it), and the
judgement of what changed as a pure function."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from tests.demo import writes

#: A tree that writes the ways the demo's processes do: relative paths after a chdir
#: (a shell's `cd`, a thread's, `subprocess`'s cwd=), renames, links, a unix socket,
#: read-only opens and an unnamed O_TMPFILE (neither is a write).
TREE = textwrap.dedent("""
    import os, socket, subprocess, sys, threading
    top = sys.argv[1]
    os.chdir(top)
    os.mkdir("made")
    with open("made/kept", "w") as f:
        f.write("x")
    open("made/kept").read()                      # read-only: not a write
    with open("gone", "w"):
        pass
    os.unlink("gone")                             # transient
    os.rename("made/kept", "made/moved")
    os.link("made/moved", "made/hard")
    os.symlink("moved", "made/soft")
    fd = os.open(".", os.O_TMPFILE | os.O_WRONLY)  # no name: not a write
    os.close(fd)
    def in_thread():                              # a thread's chdir moves the process
        os.chdir("made")
    t = threading.Thread(target=in_thread); t.start(); t.join()
    os.mkdir("sub")                               # top/made/sub
    os.truncate("moved", 0)
    s = socket.socket(socket.AF_UNIX); s.bind("sock"); s.close()
    subprocess.run(["sh", "-c", "mkdir child && cd child && : > 'we\\"ird\\nna>me é'"],
                   cwd=os.path.join(top, "elsewhere"), check=True)
    subprocess.run(["mkdir", "rel"], cwd="sub", check=True)
    os.rmdir("sub/rel")
""")


@pytest.fixture(scope="module")
def strace_usable():
    why = writes.cannot_trace()
    assert why is None, why  # scripts/setup.sh installs strace: not a skip


def trace_of(tmp_path, script: str, *args: str) -> list[writes.Write]:
    trace = tmp_path / "t.strace"
    subprocess.run([*writes.strace_argv(trace), sys.executable, "-c", script, *args],
                   check=True, cwd=tmp_path, timeout=120)
    with open(trace, errors="surrogateescape") as lines:
        found, _ = writes.parse(lines, str(tmp_path))
    return found


def test_every_write_of_the_tree_is_read_with_its_full_path(tmp_path, strace_usable):
    top = tmp_path / "top"
    (top / "elsewhere").mkdir(parents=True)
    found = {(w.effect, w.path) for w in trace_of(tmp_path, TREE, str(top))}
    t = str(top)
    assert found == {
        ("create", f"{t}/made"),
        ("write", f"{t}/made/kept"),
        ("write", f"{t}/gone"), ("remove", f"{t}/gone"),
        ("remove", f"{t}/made/kept"), ("create", f"{t}/made/moved"),
        ("create", f"{t}/made/hard"),
        ("create", f"{t}/made/soft"),
        ("create", f"{t}/made/sub"),
        ("write", f"{t}/made/moved"),
        ("create", f"{t}/made/sock"),
        ("create", f"{t}/elsewhere/child"),
        ("write", f"{t}/elsewhere/child/we\"ird\nna>me é"),
        ("create", f"{t}/made/sub/rel"), ("remove", f"{t}/made/sub/rel"),
    }, found


def test_the_escapes_strace_prints_come_back_as_the_names_bytes():
    assert writes.unescape(r'a\"b\nc\76d \303\251\x41\\') == 'a"b\nc>d éA\\'
    assert writes.unescape(r"\377") == os.fsdecode(b"\xff")  # not UTF-8: as os.listdir says


def test_the_command_ends_before_the_trace_when_it_leaves_a_process(tmp_path, strace_usable):
    """The demo leaves its platform running: its exit code comes when it exits, the
    trace ends when the last process it started does, and until then those are named."""
    flag = tmp_path / "stop"
    lingers = ("import pathlib, sys, time\n"
               "while not pathlib.Path(sys.argv[1]).exists(): time.sleep(0.05)\n"
               "pathlib.Path(sys.argv[2]).write_text('x')\n")
    daemon = ("import subprocess, sys\n"
              "subprocess.Popen([sys.executable, '-c', *sys.argv[1:]], start_new_session=True)\n"
              "print('started'); sys.exit(3)\n")
    traced = writes.Traced(tmp_path / "t.strace",
                           [sys.executable, "-c", daemon, lingers, str(flag),
                            str(tmp_path / "late")],
                           tmp_path, dict(os.environ), tmp_path / "out", tmp_path / "err")
    try:
        assert traced.wait_command(timeout=60) == 3
        assert (tmp_path / "out").read_text() == "started\n"
        left = traced.wait_trace(timeout=0.5)
        assert len(left) == 1 and str(flag) in writes.command_line(left[0])
        flag.touch()
        assert traced.wait_trace(timeout=60) == []
    finally:
        flag.touch()
        traced.stop()
    with open(traced.trace) as lines:
        found, ran = writes.parse(lines, str(tmp_path))
    late = [w for w in found if w.path == str(tmp_path / "late")]
    # the lingering process's write, after its parent exited
    assert late and "-c import pathlib" in ran[late[0].pid]
    # the command's stdout and stderr are the caller's descriptors, not the tree's writes
    assert not [w for w in found if w.path in (str(tmp_path / "out"), str(tmp_path / "err"))]


# --- the judgement, a pure function ---------------------------------------------------

WORK = "/w/work"
F = ("f", 1, 10)


def judge(touched: dict[str, str], before: dict, now: dict, known=lambda path: True,
          ignore=lambda path: False) -> list[str]:
    found = [writes.Write(7, "openat", effect, path) for path, effect in touched.items()]
    return writes.changed(found, {7: "python3 x"}, [WORK], before, known,
                          lambda path: now.get(path), ignore)


def test_a_file_left_outside_is_a_change_and_says_who_wrote_it():
    assert judge({"/tmp/left": "write"}, {}, {"/tmp/left": F}) == [
        "/tmp/left: absent -> f 10 bytes mtime 1; write by 7 (python3 x)"]


def test_what_the_tree_undid_or_never_changed_is_not_a_change():
    touched = {"/tmp/transient": "write", "/home/u/.lock": "write", "/tmp/dir": "create"}
    before = {"/home/u/.lock": F, "/tmp/dir": ("d",)}
    # an unwritten lock file keeps its state; a directory's mtime is not compared
    assert judge(touched, before, {"/home/u/.lock": F, "/tmp/dir": ("d",)}) == []


def test_a_changed_or_removed_file_outside_is_a_change():
    assert len(judge({"/home/u/a": "write", "/home/u/b": "remove"},
                     {"/home/u/a": F, "/home/u/b": F}, {"/home/u/a": ("f", 2, 10)})) == 2


def test_the_work_dir_and_devices_are_not_outside_but_shared_memory_is():
    touched = {f"{WORK}/x": "write", "/dev/null": "write", "/proc/self/attr": "write",
               "/dev/shm/seg": "create", "/w/work2/x": "write"}
    now = {p: F for p in touched}
    assert [line.split(":")[0] for line in judge(touched, {}, now)] == ["/dev/shm/seg",
                                                                        "/w/work2/x"]


def test_a_path_the_snapshot_did_not_cover_is_cleared_only_by_its_absence():
    assert judge({"/opt/x": "write"}, {}, {}, known=lambda path: False) == []
    assert judge({"/opt/x": "write"}, {}, {"/opt/x": F}, known=lambda path: False) == [
        "/opt/x: unknown (not in the snapshot) -> f 10 bytes mtime 1; write by 7 (python3 x)"]


def test_ignored_paths_are_the_callers_to_account_for():
    assert judge({"/tmp/x": "write"}, {}, {"/tmp/x": F}, ignore=lambda path: True) == []


def test_the_snapshot_reads_the_states_find_sees(tmp_path):
    (tmp_path / "d" / "__pycache__").mkdir(parents=True)
    (tmp_path / "d" / "f").write_text("abc")
    (tmp_path / "d" / "__pycache__" / "x.pyc").write_text("")
    (tmp_path / "skipped").mkdir()
    (tmp_path / "d" / "l").symlink_to("f")
    snap = writes.snapshot([tmp_path], [tmp_path / "skipped"])
    for name in ("d", "d/f", "d/l"):
        assert snap[str(tmp_path / name)] == writes.state(str(tmp_path / name)), name
    assert snap[str(tmp_path / "d" / "f")][0::2] == ("f", 3)
    assert str(tmp_path / "skipped") not in snap
    assert not any("__pycache__" in p for p in snap)
    assert not writes.covered(str(tmp_path / "d" / "__pycache__" / "x.pyc"), [tmp_path], [])
    assert not writes.covered(str(tmp_path / "skipped" / "y"), [tmp_path],
                              [tmp_path / "skipped"])
    assert writes.covered(str(tmp_path / "d" / "new"), [tmp_path], [tmp_path / "skipped"])
    assert not writes.covered(str(pathlib.Path("/elsewhere")), [tmp_path], [])
