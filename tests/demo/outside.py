"""Run a command where what it writes outside its work dir can be seen, and only that.

The demo's end-to-end test must not blame the demo for what other processes on the
machine write meanwhile (other xdist workers, other jobs, a developer's shell). So the
demo runs in a mount namespace of its own (`unshare --mount`) in which each watched
root ($HOME, the checkout, /tmp) is an overlay: the real directory as its lower layer,
an empty upper layer on a tmpfs. Whatever the command's processes (and every process
they start, daemons included: they inherit the namespace) create, modify or remove
under a root lands in that root's upper layer and nowhere else; other processes write
to the real directory, which the upper layer never sees. The work dir itself is the
real one, bind-mounted back over the overlay, so the command's results are where the
caller reads them.

After the run, the upper layers are the changes: a file there is new or modified
(compared with the real one: a file only opened for writing is copied up unchanged,
its mtime kept), a whiteout (a 0/0 character device) is a removal, a directory is
new unless the real one exists (and counted when it holds a file). A temporary file
the command made and removed leaves nothing. The layers are read through
`/proc/<pid>/root` of the command's parent, which keeps the namespace alive until the
caller is done.

Linux overlayfs (Documentation/filesystems/overlayfs.rst: whiteouts, opaque
directories, `userxattr` for an unprivileged mount, 5.11+). The same document calls
the overlay's view undefined (not a crash) where the lower layer changes while it is
mounted, as /tmp and $HOME do under other processes: the command sees its own files
there and the ones it reads (Python, the checkout), not theirs.
As root the namespace needs no more; as another user it is a user namespace mapping
that user to root (`unshare --map-root-user`). A process in it stops nowhere; tracing
the demo's system calls with strace instead stopped it at every file a Python import
or a git command opens (benchmarks/outside_writes.py measures both on `import paddle`,
benchmarks/results/outside_writes.json).
"""

from __future__ import annotations

import os
import pathlib
import select
import shlex
import signal
import stat
import subprocess
import sys
import time
from typing import Sequence

#: Where the upper layers live inside the namespace (a tmpfs mounted there): an empty
#: directory of every Debian system (FHS), hidden only from the command.
LAYERS = pathlib.Path("/mnt")

#: Python's own bytecode cache of the code it runs: the demo's children keep theirs in
#: the work dir (PYTHONPYCACHEPREFIX); the demo's own first process, started as a user
#: starts it, may compile the checkout's modules where Python always puts them.
BYTECODE = "__pycache__"


def top_roots(roots: Sequence[pathlib.Path]) -> list[pathlib.Path]:
    """The roots without those inside another (one overlay covers them)."""
    resolved = sorted({pathlib.Path(os.path.realpath(r)) for r in roots},
                      key=lambda p: len(p.parts))
    kept: list[pathlib.Path] = []
    for root in resolved:
        if root == pathlib.Path("/"):
            raise ValueError("cannot watch / as a root")
        if not any(root.is_relative_to(k) for k in kept):
            kept.append(root)
    return sorted(kept)


def _privileged() -> bool:
    return os.geteuid() == 0


def _unshare() -> list[str]:
    if _privileged():
        return ["unshare", "--mount", "--propagation", "private"]
    return ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]


def _setup_script(roots: Sequence[pathlib.Path], work: pathlib.Path, cwd: pathlib.Path) -> str:
    """The shell lines that make the namespace's view, then exec the command in `cwd`
    (entered again by its path: the directory inherited from before the mounts is the
    real one, and writes relative to it would bypass the overlay)."""
    for path in (*roots, work):
        if any(ch in str(path) for ch in ",:\\"):
            raise ValueError(f"{path}: overlay options cannot name a path with , : or \\")
    options = "" if _privileged() else ",userxattr"
    q = shlex.quote
    lines = ["set -e", f"mount -t tmpfs -o mode=700 mlops-outside {LAYERS}"]
    covered = any(work.is_relative_to(r) for r in roots)
    if covered:  # keep the real work dir reachable while the overlay hides it
        lines += [f"mkdir {LAYERS}/work-dir", f"mount --bind {q(str(work))} {LAYERS}/work-dir"]
    for i, root in enumerate(roots):
        layer = LAYERS / str(i)
        lines += [f"mkdir -p {layer}/upper {layer}/work",
                  f"mount -t overlay mlops-outside -o lowerdir={q(str(root))},"
                  f"upperdir={layer}/upper,workdir={layer}/work{options} {q(str(root))}"]
    if covered:
        lines += [f"mount --bind {LAYERS}/work-dir {q(str(work))}", f"umount {LAYERS}/work-dir"]
    return "\n".join([*lines, f"cd -- {q(str(cwd))}", 'exec "$@"'])


#: Runs the command as its child with the caller's stdout/stderr descriptors (and no
#: stdin), prints that child's pid then its exit code, and then holds the namespace
#: until its own stdin closes (the command's daemons may live on; the caller reads the
#: layers through this process).
_WRAPPER = ("import os, subprocess, sys\n"
            "out, err = int(sys.argv[1]), int(sys.argv[2])\n"
            "child = subprocess.Popen(sys.argv[3:], stdin=subprocess.DEVNULL, stdout=out,"
            " stderr=err)\n"
            "os.close(out), os.close(err)\n"
            "print(child.pid, flush=True)\n"
            "print(child.wait(), flush=True)\n"
            "sys.stdin.read()\n")


class Isolated:
    """A command run where its writes outside `work` under `roots` are kept apart."""

    def __init__(self, roots: Sequence[pathlib.Path], work: pathlib.Path, argv: Sequence[str],
                 cwd: pathlib.Path, env: dict[str, str], out: pathlib.Path, err: pathlib.Path,
                 messages: pathlib.Path):
        self.roots = top_roots(roots)
        self.work = pathlib.Path(os.path.realpath(work))
        self.messages = messages
        script = _setup_script(self.roots, self.work, cwd)
        with open(messages, "wb") as to_messages, open(out, "wb") as stdout, \
                open(err, "wb") as stderr:
            fds = (stdout.fileno(), stderr.fileno())
            self.holder = subprocess.Popen(
                [*_unshare(), "sh", "-c", script, "sh",
                 sys.executable, "-c", _WRAPPER, *map(str, fds), *argv],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=to_messages,
                cwd=cwd, env=env, pass_fds=fds)
        self.command_pid: int | None = None

    def _line(self, deadline: float) -> str:
        assert self.holder.stdout is not None
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([self.holder.stdout], [], [], left)[0]:
            raise TimeoutError
        return self.holder.stdout.readline().decode().strip()

    def started(self, timeout: float = 60) -> str | None:
        """None once the command runs in its namespace; else why it does not (the
        namespace could not be made here: not root and no user namespaces, no overlay)."""
        try:
            self.command_pid = int(self._line(time.monotonic() + timeout) or 0) or None
        except TimeoutError:
            return f"the namespace was not ready within {timeout:.0f} s"
        if self.command_pid is None:
            self.holder.wait(60)
            return (f"cannot run it in a mount namespace with overlays here "
                    f"({' '.join(_unshare())}, then mount -t overlay; exit "
                    f"{self.holder.returncode}): "
                    f"{self.messages.read_text(errors='replace').strip()[-1000:]}")
        return None

    def wait_command(self, timeout: float) -> int:
        """The command's exit code once it has exited (its daemons may live on)."""
        assert self.command_pid is not None, "started() first"
        try:
            code = self._line(time.monotonic() + timeout)
        except TimeoutError:
            os.kill(self.command_pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired(self.holder.args, timeout) from None
        if not code:
            raise RuntimeError(f"the holder of the namespace died: "
                               f"{self.messages.read_text(errors='replace')[-2000:]}")
        return int(code)

    def _namespace(self) -> str:
        return os.readlink(f"/proc/{self.holder.pid}/ns/mnt")

    def left_behind(self) -> list[int]:
        """The processes still in the namespace, the holder aside: what the command
        started and did not stop, whichever session or parent they have now."""
        mine, found = self._namespace(), []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and int(entry.name) != self.holder.pid:
                try:
                    if os.readlink(f"/proc/{entry.name}/ns/mnt") == mine:
                        found.append(int(entry.name))
                except OSError:  # gone, or another user's
                    continue
        return sorted(found)

    def changes(self) -> list[str]:
        """What the command's processes left changed under the roots, outside the work
        dir: one line a path, saying how."""
        found: list[str] = []
        for i, root in enumerate(self.roots):
            upper = pathlib.Path(f"/proc/{self.holder.pid}/root") / LAYERS.relative_to("/") \
                / str(i) / "upper"
            found += changes_in(upper, root, privileged=_privileged())
        return found

    def stop(self) -> None:
        """Kill what is left in the namespace (by pid: every process there is the
        command's) and let the holder go; the layers go with it."""
        if self.holder.poll() is None:
            for pid in self.left_behind():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            assert self.holder.stdin is not None
            self.holder.stdin.close()
            try:
                self.holder.wait(30)
            except subprocess.TimeoutExpired:
                self.holder.kill()
                self.holder.wait()
        if self.holder.stdout is not None:
            self.holder.stdout.close()


# --- reading the upper layer ---------------------------------------------------------

def _state(st: os.stat_result) -> tuple[str, int, int]:
    kind = "l" if stat.S_ISLNK(st.st_mode) else "f" if stat.S_ISREG(st.st_mode) else "other"
    return kind, st.st_mtime_ns, st.st_size


def _opaque(path: pathlib.Path, privileged: bool) -> bool:
    name = "trusted.overlay.opaque" if privileged else "user.overlay.opaque"
    try:
        return os.getxattr(path, name, follow_symlinks=False) == b"y"
    except OSError:
        return False


#: A new directory that holds no file is not a change, as the check never counted
#: one: the demo's training steps, run locally with their pod's `HOME=/tmp`
#: (workflows/pipeline.py), make Paddle's empty `~/.cache/paddle/dataset` (made at
#: import: paddle/dataset/common.py `must_mkdirs(DATA_HOME)`) and
#: `~/.cache/paddle/to_static_tmp` (whose `<pid>` entry each process removes) there.
EMPTY_DIRECTORIES = "not counted"


def changes_in(upper: pathlib.Path, lower: pathlib.Path, privileged: bool = True) -> list[str]:
    """The changes an overlay's upper layer holds over its lower directory (the real
    one, as it is now), one line each; Python's bytecode caches aside (`BYTECODE`),
    and new directories holding no file (`EMPTY_DIRECTORIES`)."""
    found = []
    for top, dirs, files in os.walk(upper):
        rel_top = pathlib.Path(top).relative_to(upper)
        for name in sorted(dirs) + sorted(files):
            entry, real = pathlib.Path(top) / name, lower / rel_top / name
            if name == BYTECODE or BYTECODE in rel_top.parts:
                if name in dirs:
                    dirs.remove(name)
                continue
            st = os.lstat(entry)
            try:
                was: os.stat_result | None = os.lstat(real)
            except (FileNotFoundError, NotADirectoryError):
                was = None
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                found.append(f"{real}: removed")
            elif stat.S_ISDIR(st.st_mode):
                if was is None or not stat.S_ISDIR(was.st_mode):
                    dirs.remove(name)  # all of it is new
                    held = sum(len(f) for _, _, f in os.walk(entry))
                    if held:  # empty directories are not counted (EMPTY_DIRECTORIES)
                        found.append(f"{real}: new directory ({held} files in it)")
                elif _opaque(entry, privileged) and set(os.listdir(real)) - set(os.listdir(entry)):
                    found.append(f"{real}: removed and made again (entries gone)")
            elif was is None:
                found.append(f"{real}: new ({_describe(st)})")
            elif _state(st) != _state(was):
                found.append(f"{real}: modified ({_describe(was)} -> {_describe(st)})")
    return found


def _describe(st: os.stat_result) -> str:
    kind, mtime, size = _state(st)
    what = {"f": "file", "l": "symlink"}.get(kind, stat.filemode(st.st_mode)[0] + " entry")
    return f"{what}, {size} bytes, mtime {mtime}"


def command_line(pid: int) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace").strip()
    except OSError:
        return f"{pid} (gone)"
