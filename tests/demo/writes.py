"""What a process tree writes to the file system, read from its system calls.

The demo's end-to-end test must not blame the demo for what other processes on
the machine write (other xdist workers, other jobs, a developer's shell): it
runs the demo under `strace -f`, tracing only the calls that create, modify or
remove a name in the file system, and asks afterwards which of the paths the
demo's own processes touched are not as they were before.

`--seccomp-bpf` stops the tracee only at the traced calls (strace's own man
page: the filter is per system call number, so every `open`/`openat` stops,
read-only ones included; a read-only open is dropped here, not written). `-y`
prints the path behind each file descriptor (the one an `open` returned, the
directory of an `*at` call, `AT_FDCWD</cwd>`), so most paths come resolved by
the kernel; the calls without a directory descriptor (`mkdir`, `unlink`,
`rename`, ...) take a relative path from the process's working directory, which
is tracked here through `chdir`/`fchdir` and inherited at `clone`/`fork`
(shared with `CLONE_FS`, as threads do).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
from typing import Callable, Iterable, Iterator, Sequence

#: x86-64 calls that create, modify or remove a name, plus what the working
#: directory and the process tree follow from. No read/write: a write needs a
#: descriptor opened for writing, which its open shows.
CREATE_OR_MODIFY = ("open", "openat", "openat2", "creat", "truncate", "utime", "utimes",
                    "utimensat", "futimesat")
NAME_CALLS = ("mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat",
              "renameat2", "link", "linkat", "symlink", "symlinkat", "mknod", "mknodat", "bind")
TREE_CALLS = ("chdir", "fchdir", "clone", "clone3", "fork", "vfork", "execve")
TRACED = CREATE_OR_MODIFY + NAME_CALLS + TREE_CALLS

#: Flags that make an open a write (`O_CREAT` creates even with `O_RDONLY`).
WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_TMPFILE")
#: Those of them that can come with O_RDONLY (which is 0: the other two replace it).
READ_ONLY_AND = ("O_CREAT", "O_TRUNC", "O_TMPFILE")


def strace_argv(trace: os.PathLike[str] | str) -> list[str]:
    """The strace prefix writing the successful calls of `TRACED` to `trace`."""
    return ["strace", "-f", "-qq", "--seccomp-bpf", "-y", "-s", "200", "-e", "signal=none",
            "-e", "status=successful", "-e", "trace=" + ",".join(TRACED),
            "-o", os.fspath(trace), "--"]


def cannot_trace() -> str | None:
    """Why strace cannot trace a child here (not installed, ptrace refused), or None."""
    if shutil.which("strace") is None:
        return "strace is not installed (scripts/setup.sh installs Debian's package `strace`)"
    probe = subprocess.run([*strace_argv(os.devnull), "true"], capture_output=True, text=True,
                           timeout=60)
    if probe.returncode != 0:
        return f"strace cannot trace a child here: {probe.stderr.strip()[-500:]}"
    return None


@dataclasses.dataclass(frozen=True)
class Write:
    """One change a traced process made to a name: `write` (opened for writing,
    truncated, times set), `create` or `remove`."""

    pid: int
    call: str
    effect: str
    path: str


# --- reading strace's lines -------------------------------------------------------

_LINE = re.compile(r"^(\d+) +([a-z0-9_]+)\((.*)\) += (.*)$")
_SIMPLE_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "v": b"\v", "f": b"\f", "a": b"\a",
                   "b": b"\b", "\\": b"\\", '"': b'"', "'": b"'"}


def unescape(text: str) -> str:
    """strace's C-style escapes (`\\n`, `\\"`, `\\303`, `\\x41`) back to the name's bytes,
    decoded as the file system's names are (`os.fsdecode`)."""
    if "\\" not in text:
        return text
    out = bytearray()
    for match in _ESCAPE.finditer(text):
        plain, hexa, octal, other = match.groups()
        if plain is not None:
            out += plain.encode("utf-8", "surrogateescape")
        elif hexa is not None:
            out.append(int(hexa, 16))
        elif octal is not None:
            out.append(int(octal, 8))
        else:
            out += _SIMPLE_ESCAPES.get(other, other.encode("utf-8", "surrogateescape"))
    return os.fsdecode(bytes(out))


_ESCAPE = re.compile(r"([^\\]+)|\\x([0-9a-fA-F]{2})|\\([0-7]{1,3})|\\(.?)", re.S)


@dataclasses.dataclass
class _Arg:
    raw: str  # the argument as printed, strings and decorations left in
    strings: list[str]  # its quoted strings, unescaped
    fd_path: str | None  # the path strace decorated a descriptor with (`3</x>`)


_TOKEN = re.compile(
    r'"((?:[^"\\]|\\.)*)"'  # a string
    r"|<((?:[^>\\]|\\.)*)>"  # a descriptor's decoration
    r"|([{\[])|([}\]])|(,)"
    r'|([^"<{}\[\],]+)',
    re.S)


def _split_args(text: str) -> list[_Arg]:
    """Top-level arguments of a call as strace prints them (quotes, `<...>`
    decorations, `{}` and `[]` nest; a `,` inside them does not split)."""
    args: list[_Arg] = []
    raw: list[str] = []
    strings: list[str] = []
    fd_path: str | None = None
    depth = 0
    for match in _TOKEN.finditer(text):
        quoted, decorated, opening, closing, comma, _ = match.groups()
        if comma is not None and depth == 0:
            args.append(_Arg("".join(raw).strip(), strings, fd_path))
            raw, strings, fd_path = [], [], None
            continue
        if quoted is not None:
            strings.append(unescape(quoted))
        elif decorated is not None and depth == 0:
            fd_path = unescape(decorated)
        elif opening is not None:
            depth += 1
        elif closing is not None:
            depth -= 1
        raw.append(match.group(0))
    if raw or strings:
        args.append(_Arg("".join(raw).strip(), strings, fd_path))
    return args


def _returned_path(ret: str) -> str | None:
    """The path strace decorated a returned descriptor with (`3</tmp/x>`)."""
    match = re.match(r"^\d+<(.*)>(?: \(.*\))?$", ret)
    return unescape(match.group(1)) if match else None


# --- following the tree's working directories ----------------------------------------

class _Cwds:
    """Each traced pid's working directory. A child starts with its parent's (one shared
    cell under `CLONE_FS`, a copy otherwise); `chdir`/`fchdir` move it, and every
    `AT_FDCWD</dir>` strace prints says where it is."""

    def __init__(self, first_cwd: str, parents: dict[int, tuple[int, bool]]):
        self.first_cwd = first_cwd
        self.parents = parents  # child -> (parent, shares the fs struct)
        self.cells: dict[int, list[str]] = {}

    def cell(self, pid: int) -> list[str]:
        if pid not in self.cells:
            parent = self.parents.get(pid)
            if parent is None:  # the first process (or one whose clone line is missing)
                self.cells[pid] = [self.first_cwd]
            else:
                up = self.cell(parent[0])
                self.cells[pid] = up if parent[1] else [up[0]]
        return self.cells[pid]

    def resolve(self, pid: int, path: str, base: str | None = None) -> str:
        if not path.startswith("/"):
            path = os.path.join(base if base is not None else self.cell(pid)[0], path)
        return os.path.normpath(path)


def _parents(lines: Sequence[tuple[int, str, list[_Arg], str]]) -> dict[int, tuple[int, bool]]:
    parents = {}
    for pid, call, args, ret in lines:
        if call in ("clone", "clone3", "fork", "vfork") and ret.isdigit():
            shares = any("CLONE_FS" in arg.raw for arg in args)
            parents[int(ret)] = (pid, shares)
    return parents


def _parse_lines(lines: Iterable[str]) -> Iterator[tuple[int, str, list[_Arg], str]]:
    for line in lines:
        if "O_RDONLY" in line and not any(flag in line for flag in READ_ONLY_AND):
            continue  # most of the trace: a read-only open (or one that names O_RDONLY)
        match = _LINE.match(line.rstrip("\n"))
        if match is None:  # strace's own notes; a line of another form
            continue
        pid, call, args, ret = match.groups()
        if call in ("open", "openat", "openat2") and not any(flag in args for flag in WRITE_FLAGS):
            continue  # read-only: most of the trace, never a write
        yield int(pid), call, _split_args(args), ret


def parse(lines: Iterable[str], cwd: str) -> tuple[list[Write], dict[int, str]]:
    """The writes in a trace of `strace_argv` whose first process started in `cwd`,
    and what each pid ran (its last `execve`'s argv, for the report)."""
    calls = list(_parse_lines(lines))
    cwds = _Cwds(os.path.normpath(cwd), _parents(calls))
    ran: dict[int, str] = {}
    writes: list[Write] = []

    for pid, call, args, ret in calls:
        cell = cwds.cell(pid)
        for arg in args:  # ground truth where strace shows it
            if arg.raw.startswith("AT_FDCWD<") and arg.fd_path:
                cell[0] = arg.fd_path

        def at(dir_arg: int, path_arg: int) -> str:
            base = args[dir_arg].fd_path
            return cwds.resolve(pid, args[path_arg].strings[0], base)

        def plain(index: int) -> str:
            return cwds.resolve(pid, args[index].strings[0])

        def add(effect: str, path: str) -> None:
            writes.append(Write(pid, call, effect, path))

        if call in ("clone", "clone3", "fork", "vfork"):
            if ret.isdigit():
                cwds.cell(int(ret))  # a child not seen yet starts where its parent is now
                if pid in ran:  # what it runs until its own execve
                    ran.setdefault(int(ret), ran[pid])
        elif call == "execve":
            argv = args[1].strings if len(args) > 1 else []
            ran[pid] = " ".join(argv[:6])
        elif call == "chdir":
            cell[0] = plain(0)
        elif call == "fchdir" and args[0].fd_path:
            cell[0] = args[0].fd_path
        elif call in ("open", "creat", "openat", "openat2"):
            flags = "O_CREAT" if call == "creat" else args[1 if call == "open" else 2].raw
            if not any(flag in flags for flag in WRITE_FLAGS) or "O_TMPFILE" in flags:
                continue  # read-only; or a file without a name until a linkat (traced)
            path = _returned_path(ret)
            if path is None or path.endswith(" (deleted)"):
                path = plain(0) if call in ("open", "creat") else at(0, 1)
            add("write", os.path.normpath(path))
        elif call in ("truncate", "utime", "utimes"):
            add("write", plain(0))
        elif call in ("utimensat", "futimesat"):
            if args[1].strings:
                add("write", at(0, 1))
            elif args[0].fd_path:  # futimens(fd): the descriptor's own file
                add("write", args[0].fd_path)
        elif call in ("mkdir", "mknod"):
            add("create", plain(0))
        elif call in ("mkdirat", "mknodat"):
            add("create", at(0, 1))
        elif call in ("rmdir", "unlink"):
            add("remove", plain(0))
        elif call == "unlinkat":
            add("remove", at(0, 1))
        elif call in ("rename", "link"):
            if call == "rename":
                add("remove", plain(0))
            add("create", plain(1))
        elif call in ("renameat", "renameat2", "linkat"):
            if call != "linkat":
                add("remove", at(0, 1))
            add("create", at(2, 3))
            if call == "renameat2" and "RENAME_EXCHANGE" in args[-1].raw:
                add("create", at(0, 1))
        elif call == "symlink":
            add("create", plain(1))
        elif call == "symlinkat":
            add("create", at(1, 2))
        elif call == "bind" and len(args) > 1 and "AF_UNIX" in args[1].raw:
            sun_path = args[1].raw.split("sun_path=", 1)[-1]
            if args[1].strings and not sun_path.startswith("@"):  # abstract: no file
                add("create", cwds.resolve(pid, args[1].strings[0]))
    return writes, ran


# --- running a command under the trace ----------------------------------------------

#: Runs the traced command as its child, prints that child's pid then its exit code:
#: the command ends long before the trace does (the platform it leaves stays traced).
#: Its stdout and stderr are descriptors opened by the caller, not files the traced
#: tree opens (which would count as its writes).
_WRAPPER = ("import os, subprocess, sys\n"
            "out, err = int(sys.argv[1]), int(sys.argv[2])\n"
            "child = subprocess.Popen(sys.argv[3:], stdout=out, stderr=err)\n"
            "os.close(out), os.close(err)\n"
            "print(child.pid, flush=True)\n"
            "print(child.wait(), flush=True)\n")


class Traced:
    """A command run under `strace -f`; the trace goes on as long as any process of its
    tree lives (daemons it started included), and ends when the last one exits.

    The command's stdout and stderr go to `out` and `err`; strace's own messages to
    `<trace>.stderr`."""

    def __init__(self, trace: pathlib.Path, argv: Sequence[str], cwd: pathlib.Path,
                 env: dict[str, str], out: pathlib.Path, err: pathlib.Path):
        self.trace = trace
        self.messages = trace.with_name(trace.name + ".stderr")
        with open(self.messages, "wb") as messages, open(out, "wb") as stdout, \
                open(err, "wb") as stderr:
            fds = (stdout.fileno(), stderr.fileno())
            self.strace = subprocess.Popen(
                [*strace_argv(trace), sys.executable, "-c", _WRAPPER, *map(str, fds), *argv],
                stdout=subprocess.PIPE, stderr=messages, cwd=cwd, env=env, pass_fds=fds)
        self.command_pid: int | None = None

    def _line(self, deadline: float) -> str:
        assert self.strace.stdout is not None
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([self.strace.stdout], [], [], left)[0]:
            raise TimeoutError
        return self.strace.stdout.readline().decode().strip()

    def wait_command(self, timeout: float) -> int:
        """The command's exit code once it has exited (its daemons may live on)."""
        deadline = time.monotonic() + timeout
        try:
            if self.command_pid is None:
                self.command_pid = int(self._line(deadline) or 0) or None
            code = self._line(deadline) if self.command_pid else ""
        except TimeoutError:
            if self.command_pid is not None:
                os.kill(self.command_pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired(self.strace.args, timeout) from None
        if not code:  # the wrapper did not run (strace could not start it) or died
            self.strace.wait(60)
            raise RuntimeError(f"strace exited {self.strace.returncode}: "
                               f"{self.messages.read_text(errors='replace')[-2000:]}")
        return int(code)

    def wait_trace(self, timeout: float) -> list[int]:
        """Wait for the trace to end: [] once it has, else the pids still traced."""
        try:
            self.strace.wait(timeout)
            return []
        except subprocess.TimeoutExpired:
            return tracees(self.strace.pid)

    def stop(self) -> None:
        """End the trace if it still runs (strace detaches from what is left)."""
        if self.strace.poll() is None:
            self.strace.terminate()
            try:
                self.strace.wait(30)
            except subprocess.TimeoutExpired:
                self.strace.kill()
                self.strace.wait()
        if self.strace.stdout is not None:
            self.strace.stdout.close()


def tracees(tracer: int) -> list[int]:
    """The processes `tracer` traces now (their `TracerPid`)."""
    found = []
    for status in os.scandir("/proc"):
        if not status.name.isdigit():
            continue
        try:
            with open(f"/proc/{status.name}/status") as text:
                if any(line.split() == ["TracerPid:", str(tracer)] for line in text):
                    found.append(int(status.name))
        except OSError:
            continue
    return found


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as raw:
            return raw.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


# --- what changed ------------------------------------------------------------------

#: A path's state: ("d",) for a directory (its mtime moves with any entry's change,
#: whoever makes it), else (find's type letter, mtime in ns, size); None: absent.
State = tuple[str, ...] | tuple[str, int, int] | None

_TYPES = {stat.S_IFREG: "f", stat.S_IFDIR: "d", stat.S_IFLNK: "l", stat.S_IFIFO: "p",
          stat.S_IFSOCK: "s", stat.S_IFCHR: "c", stat.S_IFBLK: "b"}


def state(path: str) -> State:
    """A path's state now (not following a symlink)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    kind = _TYPES.get(stat.S_IFMT(st.st_mode), "?")
    return ("d",) if kind == "d" else (kind, st.st_mtime_ns, st.st_size)


#: Directory names whose trees a snapshot does not walk (bytecode, the test tools'
#: caches: many files, never the demo's); a path in them has no known prior state.
PRUNED = ("__pycache__", ".pytest_cache", ".hypothesis")


def snapshot(roots: Sequence[pathlib.Path], skip: Sequence[pathlib.Path]) -> dict[str, State]:
    """Every path under `roots` (outside `skip` and `PRUNED` trees) with its state.

    GNU find walks, not os.walk: $HOME alone holds ~300,000 files here (toolchains,
    Python), which cost os.walk and lstat ~7 CPU-s and 9 s a walk on the demo's critical
    path, find ~2. Paths that vanish during the walk (other processes' temp files) are
    skipped (find's exit code 1)."""
    pruned = [("-name", name) for name in PRUNED]
    pruned += [("-path", str(s)) for s in skip]  # find's -path matches as fnmatch does
    expr = [arg for i, (test, pattern) in enumerate(pruned)
            for arg in ([] if i == 0 else ["-o"]) + [test, pattern]]
    walk = subprocess.run(
        ["find", *map(str, roots), "(", *expr, ")", "-prune", "-o",
         "-printf", "%y\\0%p\\0%T@\\0%s\\0"],
        capture_output=True, timeout=600)
    assert walk.returncode in (0, 1), walk.stderr.decode(errors="replace")[-2000:]
    fields = walk.stdout.split(b"\0")[:-1]
    found: dict[str, State] = {}
    for i in range(0, len(fields), 4):
        kind, path = fields[i].decode(), os.fsdecode(fields[i + 1])
        if kind == "d":
            found[path] = ("d",)
            continue
        seconds, _, fraction = fields[i + 2].decode().partition(".")
        mtime = int(seconds) * 10**9 + int(fraction[:9].ljust(9, "0"))
        found[path] = (kind, mtime, int(fields[i + 3]))
    return found


def covered(path: str, roots: Sequence[pathlib.Path], skip: Sequence[pathlib.Path]) -> bool:
    """Whether `snapshot(roots, skip)` would list `path` if it existed."""
    def under(p: pathlib.Path) -> bool:
        return path == str(p) or path.startswith(str(p).rstrip("/") + "/")
    if not any(under(root) for root in roots) or any(under(s) for s in skip):
        return False
    return not any(part in PRUNED for part in pathlib.PurePath(path).parts)


#: Where no file of the tree's can be: kernel interfaces, and the devices under /dev
#: (`/dev/null` opened for writing); /dev/shm and /dev/mqueue do hold files.
NOT_FILES = ("/proc", "/sys", "/dev")
FILES_UNDER_DEV = ("/dev/shm", "/dev/mqueue")


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def outside(path: str, inside: Sequence[str]) -> bool:
    """A path outside the `inside` directories that can be a file."""
    if any(_under(path, d) for d in inside):
        return False
    if any(_under(path, d) for d in NOT_FILES):
        return any(_under(path, d) for d in FILES_UNDER_DEV)
    return True


UNKNOWN = ("unknown",)


def changed(writes: Sequence[Write], ran: dict[int, str], inside: Sequence[str],
            before: dict[str, State], known: Callable[[str], bool],
            now: Callable[[str], State], ignore: Callable[[str], bool]) -> list[str]:
    """The paths outside `inside` the writes touched whose state now differs from
    `before`, one line each saying how and who.

    A path `known(path)` says the snapshot covers has its state in `before` (absent
    if not listed); another's state before is unknown, and only its absence now
    (a temporary file its process removed) clears it. `ignore(path)`: a path the
    caller accounts for otherwise."""
    touched: dict[str, list[Write]] = {}
    for write in writes:
        if outside(write.path, inside):
            touched.setdefault(write.path, []).append(write)
    found = []
    for path, by in sorted(touched.items()):
        was = before.get(path) if known(path) else UNKNOWN
        is_ = now(path)
        if is_ == was or (was is UNKNOWN and is_ is None) or ignore(path):
            continue
        who = sorted({f"{w.effect} by {w.pid} ({ran.get(w.pid, '?')})" for w in by})
        found.append(f"{path}: {_show(was)} -> {_show(is_)}; {', '.join(who[:3])}")
    return found


def _show(s: State) -> str:
    if s is None:
        return "absent"
    if s is UNKNOWN:
        return "unknown (not in the snapshot)"
    return "directory" if s == ("d",) else f"{s[0]} {s[2]} bytes mtime {s[1]}"
