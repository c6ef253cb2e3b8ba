"""What watching the demo's writes outside its work dir costs a process, two ways.

The demo's end-to-end test must see what the demo's own processes write under $HOME,
the checkout and /tmp, and nothing another process writes there. Two ways were tried:

* `strace`: every process of the demo traced (`strace -f --seccomp-bpf -y`), stopping
  at each call that can create, modify or remove a name. `open`/`openat` is one of
  them, read-only or not (seccomp filters by call number), so every file a Python
  import or a git command opens stops the process;
* `overlay`: the demo in a mount namespace of its own in which those roots are
  overlays (tests/demo/outside.py); nothing stops, lookups go through one more layer.

The benchmark times `import paddle` (the demo's processes start with it: ~2,800
`openat` calls, a fifth of them failed probes) `--runs` times each way and plainly,
alternating, on the machine as it is, and writes the mean CPU-seconds (user + system,
the traced process and strace together) of each to benchmarks/results/outside_writes.json.
Each round makes a fresh namespace and imports three times in it: the first import
is reported apart (`overlay_cold`: the overlay's dentries are not cached yet), the
other two as `overlay` (the demo's many processes share one namespace).

    python benchmarks/outside_writes.py [--runs 10]
"""

import argparse
import json
import os
import pathlib
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.demo import outside  # noqa: E402

#: The calls strace stopped at in the first version of the test (x86-64).
TRACED = ("open,openat,openat2,creat,truncate,utime,utimes,utimensat,futimesat,mkdir,mkdirat,"
          "rmdir,unlink,unlinkat,rename,renameat,renameat2,link,linkat,symlink,symlinkat,"
          "mknod,mknodat,bind,chdir,fchdir,clone,clone3,fork,vfork,execve")
IMPORT = [sys.executable, "-W", "ignore", "-c", "import paddle"]


def cpu_of(argv: list[str]) -> float:
    """CPU-seconds (user + system) of a command and everything it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def in_overlay(runs: int, scratch: pathlib.Path) -> list[float]:
    """`runs` imports one after another in one namespace (each timed inside it)."""
    timer = ("import json, resource, subprocess, sys\n"
             "out = []\n"
             "for _ in range(int(sys.argv[1])):\n"
             "    b = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
             "    subprocess.run(sys.argv[2:], check=True, stdout=subprocess.DEVNULL,"
             " stderr=subprocess.DEVNULL)\n"
             "    a = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
             "    out.append(a.ru_utime - b.ru_utime + a.ru_stime - b.ru_stime)\n"
             "print(json.dumps(out))\n")
    work = scratch / "w"
    work.mkdir(exist_ok=True)
    isolated = outside.Isolated(
        [pathlib.Path.home(), ROOT, pathlib.Path(tempfile.gettempdir())], work,
        [sys.executable, "-c", timer, str(runs), *IMPORT], scratch, dict(os.environ),
        scratch / "out", scratch / "err", scratch / "messages")
    try:
        why = isolated.started()
        if why is not None:
            raise SystemExit(why)
        assert isolated.wait_command(timeout=600) == 0, (scratch / "err").read_text()
    finally:
        isolated.stop()
    return json.loads((scratch / "out").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    strace = shutil.which("strace")
    plain, traced, overlay, cold = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        scratch = pathlib.Path(tmp)
        cpu_of(IMPORT)  # the page cache warm for everyone
        for _ in range(args.runs):  # the three ways in turn: the machine's load moves
            plain.append(cpu_of(IMPORT))
            if strace:
                traced.append(cpu_of([strace, "-f", "-qq", "--seccomp-bpf", "-y", "-e",
                                      "signal=none", "-e", "status=successful", "-e",
                                      f"trace={TRACED}", "-o", os.devnull, *IMPORT]))
            first, *then = in_overlay(3, scratch)  # a fresh namespace each round
            cold.append(first)
            overlay += then

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 3) if values else None

    result = {
        "what": "CPU-seconds of `import paddle`, mean over runs",
        "runs": args.runs,
        "plain": mean(plain),
        "strace": mean(traced),
        "overlay": mean(overlay),
        "overlay_cold": mean(cold),
        "strace_extra": round(mean(traced) / mean(plain) - 1, 3) if traced else None,
        "overlay_extra": round(mean(overlay) / mean(plain) - 1, 3),
        "load_average": os.getloadavg(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "kernel": platform.release()},
        "measured": time.strftime("%Y-%m-%d"),
    }
    out = ROOT / "benchmarks" / "results" / "outside_writes.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
