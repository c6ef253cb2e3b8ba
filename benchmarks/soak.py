"""Soak: the local platform under steady load for a long while, with canaries coming and going.

    python benchmarks/soak.py [--minutes 30] [--cycle 180] [--rps 20] [--out FILE]

Starts the real local platform (Prometheus, HAProxy, the sync, `mlops serve`
processes) and the real controller (`mlops controller run --readiness local`)
on a fresh bare GitOps repo, and `mlops load` at a steady rate through
HAProxy for the whole run. Every `--cycle` seconds a new version of a tiny
Paddle export is proposed and merged, in turn:

* **good**: the same weights; the controller should promote it;
* **broken**: its weights file is altered on the models volume right after the
  merge, so it differs from the digest the Deployment names and the server
  refuses to start (issue 16, finding 6); merged at 0 %, it never becomes
  ready and the controller rolls it back after `ready_timeout`, with no client
  ever routed to it;
* **human**: good, and a person commits to the GitOps repo mid-canary;
* **restart**: good, and the controller is killed (SIGKILL) mid-canary and restarted.

Meanwhile a trickle of the adversarial review's bad requests (a binary
BYTES shape of 2**27 in 4 bytes, 990-deep nesting, 33 images, a bad
`log_id`, a client hanging up mid-body) goes to the same frontend. Every 15 s
the RSS and open file descriptors of the sync, the controller and each
model server are sampled.

Reported (and saved as JSON, default benchmarks/results/soak.json): outcome
per cycle; decision commits and any duplicate (the same decision committed
twice for one candidate); non-2xx of the steady load vs its 2xx; RSS growth
after warm-up (the first fifth) and fd slope per process. Targets (issue 16):
0 lost or duplicate decisions, non-2xx <= 0.1 % of good requests, RSS growth
<= 5 % after warm-up, no fd growth.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time

import requests
import yaml
from _platform import ROOT, machine, model_version, scratch, start_platform, tiny_model, wait  # noqa: I001
from PIL import Image

from cogs.files import read_json
from cogs.ports import free_port
from gitops.forges.local import LocalForge
from local.platform.workdir import Workdir
from promotion.decision.policy import load_policy
from promotion.gitrepo.propose import propose
from tests.fixtures.gitops import Human

MODEL = "soak-detector"
POLICY = {"steps": [10, 50, 100], "interval": "5s", "min_requests": 20,
          "min_latency_samples": 20, "no_traffic_grace": "30s", "ready_timeout": "45s",
          "metrics": {"preset": "haproxy"}}
KINDS = ("good", "broken", "human", "restart")
SAMPLE_EVERY = 15.0


def images(dest: pathlib.Path) -> pathlib.Path:
    dest.mkdir(parents=True)
    for i in range(4):
        Image.new("RGB", (96, 96), (40 * i, 80, 120)).save(dest / f"{i}.png")
    return dest


def state(repo: pathlib.Path) -> dict:
    text = subprocess.run(["git", "--git-dir", str(repo), "show",
                           f"main:apps/{MODEL}/promotion.yaml"],
                          capture_output=True, text=True).stdout
    return yaml.safe_load(text) or {}


def proc_sample(pid: int | None) -> tuple[int, int] | None:
    """(RSS bytes, open fds) of a live process, or None."""
    if not pid:
        return None
    try:
        rss = next(int(line.split()[1]) * 1024 for line in
                   pathlib.Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("VmRSS:"))
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return None


class Controller:
    """`mlops controller run` as a subprocess; kill -9 and restart on demand."""

    def __init__(self, repo: pathlib.Path, wd: Workdir, work: pathlib.Path) -> None:
        prom = f"http://127.0.0.1:{read_json(wd.config)['prometheus_port']}"
        self.argv = [sys.executable, "-m", "mlops", "controller", "run", "--gitops", str(repo),
                     "--prometheus", prom, "--poll", "0.5", "--settle", "2",
                     "--readiness", "local", "--platform-workdir", str(wd.root),
                     "--workdir", str(work / "controller"), "--metrics-port",
                     str(free_port())]
        self.log = open(work / "controller.log", "ab")
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def kill_and_restart(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.restarts += 1
        self.start()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def bad_requests(url: str, stop: threading.Event, counts: dict[str, int]) -> None:
    """One bad request every 2 s, in turn; counts the status codes they got."""
    infer = f"{url}/v2/models/{MODEL}/infer"
    png = io.BytesIO()
    Image.new("RGB", (1, 1)).save(png, "PNG")
    tiny = base64.b64encode(png.getvalue()).decode()
    header = json.dumps({"inputs": [{"name": "image_bytes", "shape": [2 ** 27],
                                     "datatype": "BYTES",
                                     "parameters": {"binary_data_size": 4}}]}).encode()
    cases = [
        lambda: requests.post(infer, data=header + b"\x01\x00\x00\x00", timeout=10, headers={
            "Inference-Header-Content-Length": str(len(header))}),
        lambda: requests.post(infer, timeout=10, data=(
            '{"inputs": [{"name": "image_bytes", "shape": [1], "datatype": "BYTES", "data": '
            + "[" * 990 + '"aGk="' + "]" * 990 + "}]}")),
        lambda: requests.post(infer, timeout=10, json={"inputs": [{
            "name": "image_bytes", "shape": [33], "datatype": "BYTES", "data": [tiny] * 33}]}),
        lambda: requests.post(f"{url}/GeneralModelService/inference", timeout=10,
                              json={"feed": [{"image": tiny}], "log_id": "abc"}),
    ]
    i = 0
    while not stop.wait(2.0):
        try:
            if i % 5 == 4:  # a client that hangs up mid-body
                host, port = url.split("//")[1].split(":")
                with socket.create_connection((host, int(port)), timeout=5) as sock:
                    sock.sendall(b"POST /v2/models/x/infer HTTP/1.1\r\nHost: x\r\n"
                                 b"Content-Length: 100\r\n\r\n{")
                code = "hangup"
            else:
                code = str(cases[i % 5]().status_code)
        except requests.RequestException as exc:
            code = type(exc).__name__
        counts[code] = counts.get(code, 0) + 1
        i += 1


def slope_and_growth(points: list[tuple[float, int]]) -> dict[str, float] | None:
    """Least-squares slope per hour and growth of the last fifth over the first, after
    warm-up (the first fifth of the samples is dropped)."""
    points = points[len(points) // 5:]
    if len(points) < 5:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points) or 1.0
    slope = sum((t - mt) * (v - mv) for t, v in points) / var
    k = max(1, n // 5)
    head = sum(v for _, v in points[:k]) / k
    tail = sum(v for _, v in points[-k:]) / k
    # Growth over the second half alone: a warm-up that levels off shows here as ~0,
    # a leak as about half the whole growth.
    middle = sum(v for _, v in points[n // 2 - k // 2: n // 2 - k // 2 + k]) / k
    return {"slope_per_hour": round(slope * 3600, 2), "first": round(head, 1),
            "last": round(tail, 1), "growth_pct": round((tail / head - 1) * 100, 2) if head else 0,
            "second_half_growth_pct": round((tail / middle - 1) * 100, 2) if middle else 0}


def duplicates(repo: pathlib.Path) -> tuple[int, list[str]]:
    """(decision commits, subjects committed twice in a row for one candidate)."""
    out = subprocess.run(["git", "--git-dir", str(repo), "log", "--reverse",
                          "--format=%s%x1f%(trailers:key=Mlops-Decision,valueonly,separator=)",
                          "main"], capture_output=True, text=True, check=True).stdout
    decisions = [line.split("\x1f") for line in out.splitlines() if "\x1f" in line]
    decisions = [(s, d) for s, d in decisions if d]
    dup = [s for (s, d), (s2, d2) in zip(decisions, decisions[1:]) if (s, d) == (s2, d2)]
    return len(decisions), dup


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--cycle", type=float, default=180.0, help="seconds per canary cycle")
    parser.add_argument("--rps", type=float, default=20.0)
    parser.add_argument("--out", type=pathlib.Path,
                        default=ROOT / "benchmarks" / "results" / "soak.json")
    args = parser.parse_args(argv)
    total = args.minutes * 60

    with scratch("mlops-soak-") as (base, wd):
        repo = start_platform(base, wd, poll_interval=0.5)
        src = tiny_model(base / "tiny")
        versions = base / "models"
        forge, policy = LocalForge(repo), load_policy(POLICY)
        propose(model_version(src, versions / "v0", MODEL, "v0"), str(repo), forge, policy,
                approval="auto")
        # Ready, not only a URL: the first runs started the load while HAProxy had no server
        # up yet, and counted ~35 "No server is available" 503s in its first 2 s.
        wait(lambda: (read_json(wd.status, {}) or {}).get("models", {}).get(MODEL, {})
             .get("versions", {}).get("v0", {}).get("ready"), 300, "the first version to serve")
        url = read_json(wd.status)["models"][MODEL]["url"]
        controller = Controller(repo, wd, base)
        load_json = base / "load.json"
        load = subprocess.Popen(
            [sys.executable, "-m", "mlops", "load", url, "--rps", str(args.rps),
             "--duration", str(total), "--images", str(images(base / "images")),
             "--model", MODEL, "--json", str(load_json)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        stop = threading.Event()
        bad: dict[str, int] = {}
        threading.Thread(target=bad_requests, args=(url, stop, bad), daemon=True).start()
        samples: dict[str, list[tuple[float, int, int]]] = {}

        def sample() -> None:
            doc = read_json(wd.status, {}) or {}
            # Per process: a restarted controller is a new process whose warm-up must not
            # read as the old one's growth (the first run mixed three controllers: +7.9 %).
            pids = {"sync": doc.get("sync_pid"),
                    f"controller pid {controller.proc.pid}": controller.proc.pid}
            for version, info in (doc.get("models", {}).get(MODEL, {})
                                  .get("versions", {}) or {}).items():
                pids[f"server {version} pid {info.get('pid')}"] = info.get("pid")
            now = time.monotonic()
            for name, pid in pids.items():
                got = proc_sample(pid)
                if got:
                    samples.setdefault(name, []).append((now, *got))

        cycles = []
        started = time.monotonic()
        next_sample = started
        n = 0
        try:
            while time.monotonic() - started < total - 30:
                n += 1
                kind = KINDS[(n - 1) % len(KINDS)]
                version = f"v{n}"
                t0 = time.monotonic()
                try:
                    folder = model_version(src, versions / version, MODEL, version)
                    propose(folder, str(repo), forge, policy, approval="auto")
                    if kind == "broken":  # after evaluation and merge: other weights
                        params = folder / "inference.pdiparams"
                        params.write_bytes(params.read_bytes() + b"\0")
                except Exception as exc:  # the previous canary still runs: note, go on
                    cycles.append({"n": n, "kind": kind, "version": version,
                                   "outcome": f"not proposed: {exc}", "seconds": 0})
                    continue
                acted = False
                outcome = "timeout"
                while time.monotonic() - t0 < args.cycle:
                    now = time.monotonic()
                    if now >= next_sample:
                        sample()
                        next_sample = now + SAMPLE_EVERY
                    st = state(repo)
                    active = st.get("phase") in ("waiting", "progressing", "paused")
                    if st.get("stable") == version and not active:
                        outcome = "promoted"
                        break
                    if st.get("candidate") == version and st.get("phase") == "rolled_back":
                        outcome = "rolled_back"
                        break
                    if not acted and st.get("candidate") == version and st.get("weight", 0) >= 10:
                        if kind == "human":
                            human = Human(repo, base / f"human-{n}")
                            human.sync()
                            human.write("README.md", human.read("README.md") + f"\nsoak {n}\n")
                            human.commit_push(f"docs: soak note {n}")
                            acted = True
                        elif kind == "restart":
                            controller.kill_and_restart()
                            acted = True
                    time.sleep(0.5)
                final = state(repo)
                cycles.append({"n": n, "kind": kind, "version": version, "outcome": outcome,
                               "phase": final.get("phase"), "stable": final.get("stable"),
                               "seconds": round(time.monotonic() - t0, 1)})
                print(f"cycle {n:2d} {kind:<8} {version:<4} -> {outcome:<12} "
                      f"({cycles[-1]['seconds']:.0f} s, stable {final.get('stable')})",
                      flush=True)
                while time.monotonic() - t0 < args.cycle:  # keep sampling till the slot ends
                    if time.monotonic() >= next_sample:
                        sample()
                        next_sample = time.monotonic() + SAMPLE_EVERY
                    time.sleep(0.5)
        finally:
            stop.set()
            load.wait(timeout=total + 120)
            controller.stop()

        report = json.loads(load_json.read_text()) if load_json.is_file() else {}
        statuses = report.get("status_counts", {})
        good = sum(v for k, v in statuses.items() if k.startswith("2"))
        non2xx = sum(v for k, v in statuses.items() if not k.startswith("2"))
        commits, dup = duplicates(repo)
        wanted = {"good": "promoted", "human": "promoted", "restart": "promoted",
                  "broken": "rolled_back"}
        lost = [c for c in cycles if c["outcome"] != wanted[c["kind"]]]
        procs = {}
        for name, points in samples.items():
            rss = slope_and_growth([(t, r) for t, r, _ in points])
            fds = slope_and_growth([(t, f) for t, _, f in points])
            if rss and fds:
                procs[name] = {"samples": len(points), "rss_bytes": rss, "fds": fds}
        result = {
            "benchmark": "soak", "minutes": args.minutes, "cycle_seconds": args.cycle,
            "rps": args.rps, "machine": machine(), "cycles": cycles,
            "cycles_not_as_expected": lost, "decision_commits": commits,
            "duplicate_decisions": dup, "controller_restarts": controller.restarts,
            "load": {"status_counts": statuses, "good": good, "non_2xx": non2xx,
                     "non_2xx_pct": round(100 * non2xx / max(good, 1), 4),
                     "error_samples": report.get("error_samples", {})},
            "bad_requests": bad, "processes": procs,
            "targets": {"lost_or_duplicate_decisions": 0, "non_2xx_pct_max": 0.1,
                        "rss_growth_pct_max": 5.0, "fd_growth": 0},
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n{len(cycles)} cycles, {len(lost)} not as expected, {commits} decision commits, "
          f"{len(dup)} duplicated; steady load {good} 2xx, {non2xx} other "
          f"({result['load']['non_2xx_pct']} %); bad requests {bad}")
    for status, kept in sorted(result["load"]["error_samples"].items()):
        for sample in kept:
            print(f"  load {status}: {sample}")
    for name, info in sorted(procs.items()):
        print(f"  {name:<40} RSS {info['rss_bytes']['growth_pct']:+6.2f} % "
              f"(second half {info['rss_bytes']['second_half_growth_pct']:+5.2f} %)  "
              f"fds {info['fds']['first']:.0f} -> {info['fds']['last']:.0f}")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
