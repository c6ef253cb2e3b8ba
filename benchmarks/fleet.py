"""A fleet, not one model: how the controller, the sync and the GitOps repo scale with N models.

    python benchmarks/fleet.py [--models 1,10,100] [--windows 8] [--sync-changes 10]

For each N (K = max(1, N/5) canaries in flight at once, 60 s analysis interval):

**Controller.** A fresh bare GitOps repo gets N models (v1 stable) in one
commit and K merged canaries in a second. The real controller
(`promotion.controller.Controller`, real git write-back) then runs on a
*simulated* clock: `--windows` analysis windows, `--ticks-per-window` passes
per window (idle passes cost too). Its metrics come from
`_prom_standin.py`, a Prometheus query-API stand-in in its own process that
answers the presets' real PromQL (the `haproxy` preset here, over HTTP with
the real `PrometheusSource`) from synthetic per-version series; why a stand-in
and not a real Prometheus is in its docstring (a simulated clock, and 100 x 2
real servers do not fit on 2 cores). One canary in three fails (20 % 5xx) and
must be rolled back, the others step 10 -> 25 -> 50 -> 100 -> promoted. The
benchmark plays two more parts: the *router* (after each pass it writes the
weights committed on main to the stand-in's weights file, as the sync would)
and the *humans*: when a rollout ends, the model's next candidate is merged
with plain git from another clone, in a thread that races the controller's
next pass (so rebase retries are real). Measured: pass duration p50/p99,
decision lag (window end -> decision commit pushed: the simulated wait until
the pass plus the wall time inside the pass until its push), queries per
pass, pushes and rebase retries, lost and duplicated decisions (read back from
git: each rollout's decision trailers must be exactly the expected chain),
the process's RSS, and the repo's growth extrapolated to a simulated week.

**Sync.** The real local platform (`mlops up`: HAProxy, Prometheus, the sync
daemon) on a second repo with the same N models, each version's Deployment
running a tiny HTTP stand-in pod (`python -c ... --port 8080`, it answers the
readiness probe: the weight path does not need a model) so that N x versions
processes fit on 2 cores. Once all routes are up, `--sync-changes` commits
each change one canary's weight; the clock runs from `git push` returning to
HAProxy's runtime API showing the new weight (as benchmarks/sync_latency.py).

Results: benchmarks/results/fleet.json. The machine is shared: the load
average is recorded next to each N; compare ratios from one run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import pathlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import requests
import yaml
from _platform import ROOT, machine, percentile, wait  # first: it puts the repo root on sys.path

from contracts.artifact import ModelRecord
from gitops import layout
from gitops.repo import init_repo
from gitops.writeback import Backoff, Message, WriteBack, WriteResult
from local.platform import lifecycle
from local.platform.workdir import Workdir
from promotion.controller import Controller, ControllerConfig
from promotion.decision.policy import load_policy
from promotion.gitrepo.propose import plan_proposal
from promotion.metrics.prometheus import PrometheusSource
from serving import manifests
from tests.fixtures.platform import status_doc

INTERVAL = 60.0
# No `metrics:`: a model's folder never picks the queries (the platform does: the
# controller's preset, here the stand-in's haproxy source).
POLICY = {"steps": [10, 25, 50, 100], "interval": "60s", "min_requests": 100,
          "max_error_rate": 0.05}
HEALTHY = ["10->25", "25->50", "50->100", "100->100"]
FAILING = ["10->0"]
WEEK = 7 * 24 * 3600.0
POD = """import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def model_name(i: int) -> str:
    return f"fleet-{i:03d}"


def record(model: str, version: str) -> ModelRecord:
    return ModelRecord(name=model, version=version,
                       weights_sha256=hashlib.sha256(f"{model}/{version}".encode()).hexdigest(),
                       metrics={"map50": 0.9})


def git(cwd: pathlib.Path, *args: str, sim: float | None = None, check: bool = True) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "human", "GIT_AUTHOR_EMAIL": "human@example.com",
           "GIT_COMMITTER_NAME": "human", "GIT_COMMITTER_EMAIL": "human@example.com"}
    if sim is not None:
        env["GIT_COMMITTER_DATE"] = env["GIT_AUTHOR_DATE"] = f"@{int(sim)} +0000"
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env)
    if check and proc.returncode:
        raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip()} {proc.stdout.strip()}")
    return proc.stdout.strip()


def propose(root: pathlib.Path, model: str, version: str, uri: str | None = None) -> None:
    folder = root / layout.APPS / model
    current = layout.read_model(root, model) if folder.is_dir() else None
    plan_proposal(record(model, version), current, load_policy(POLICY), image="img:1",
                  model_uri=uri or f"file:///models/{model}/{version}").write(root)


def repo_size_kb(repo: pathlib.Path) -> int:
    git(repo, "repack", "-adq")
    info = dict(line.split(": ") for line in git(repo, "count-objects", "-v").splitlines())
    return int(info["size"]) + int(info["size-pack"])


def rss_mb() -> float:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"p50": round(statistics.median(values), 4), "p95": round(percentile(values, 0.95), 4),
            "p99": round(percentile(values, 0.99), 4), "max": round(max(values), 4),
            "mean": round(statistics.fmean(values), 4), "n": len(values)}


class Standin:
    """The Prometheus-API stand-in process (benchmarks/_prom_standin.py)."""

    def __init__(self, base: pathlib.Path, failing: dict[str, float]) -> None:
        self.weights = base / "weights.json"
        self.world = base / "world.json"
        self.failing = failing
        self._write_world()
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / "_prom_standin.py"), "--world",
             str(self.world), "--weights", str(self.weights)], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def _write_world(self) -> None:
        tmp = self.world.with_suffix(".tmp")
        tmp.write_text(json.dumps({"rate": 20.0, "failing": self.failing}))
        tmp.rename(self.world)

    def set_weights(self, weights: dict[str, dict[str, int]]) -> None:
        tmp = self.weights.with_suffix(".tmp")
        tmp.write_text(json.dumps(weights))
        tmp.rename(self.weights)

    def queries(self) -> int:
        return int(requests.get(f"{self.url}/stats", timeout=5).json()["queries"])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def split_of(state: dict[str, Any]) -> dict[str, int]:
    """The router's split for one committed promotion.yaml (what the sync would apply)."""
    stable, cand, phase = state.get("stable"), state.get("candidate"), state.get("phase")
    weight = int(state.get("weight") or 0)
    if cand and phase in ("progressing", "paused") and weight:
        return {str(stable): 100 - weight, str(cand): weight}
    return {str(stable): 100}


def main_states(repo: pathlib.Path, models: list[str]) -> dict[str, dict[str, Any]]:
    """promotion.yaml of `models` at main's tip, in one `git cat-file --batch`."""
    spec = "".join(f"main:apps/{m}/promotion.yaml\n" for m in models)
    out = subprocess.run(["git", "-C", str(repo), "cat-file", "--batch"], input=spec.encode(),
                         capture_output=True, check=True).stdout
    states: dict[str, dict[str, Any]] = {}
    pos = 0
    for model in models:
        header_end = out.index(b"\n", pos)
        header = out[pos:header_end].split()
        size = int(header[2]) if len(header) == 3 else 0
        body = out[header_end + 1:header_end + 1 + size]
        pos = header_end + 1 + size + (1 if size else 0)
        states[model] = (yaml.load(body, Loader=yaml.CSafeLoader) or {}) if size else {}
    return states


def verify(repo: pathlib.Path, failing: set[str]) -> dict[str, Any]:
    """Lost and duplicated decisions: each rollout's decision chain on main, as expected."""
    sep, end = "\x1f", "\x1e"
    out = git(repo, "log", "--reverse", f"--format=%H{sep}%(trailers:only,unfold){end}", "main")
    chains: dict[tuple[str, str], list[str]] = {}
    for rec in out.split(end):
        rec = rec.strip("\n")
        if not rec:
            continue
        _sha, _, trailers = rec.partition(sep)
        t = dict((k.strip(), v.strip()) for k, _, v in
                 (line.partition(":") for line in trailers.splitlines()) if v)
        if "Mlops-Window" not in t or t.get("Mlops-Decision") == "step/ready":
            continue
        chains.setdefault((t["Mlops-Model"], t["Mlops-Candidate"]), []).append(t["Mlops-Step"])
    lost = duplicated = finished = 0
    for (model, cand), chain in chains.items():
        expected = FAILING if f"{model}/{cand}" in failing else HEALTHY
        duplicated += len(chain) - len(set(chain))
        seen = list(dict.fromkeys(chain))
        if seen != expected[:len(seen)]:
            lost += sum(1 for step in expected[:len(seen)] if step not in seen) or 1
        finished += seen == expected
    return {"rollouts_with_decisions": len(chains), "rollouts_finished": finished,
            "decisions": sum(len(c) for c in chains.values()), "lost": lost,
            "duplicated": duplicated}


def controller_run(n: int, windows: int, ticks_per_window: int,
                   workers: int = 1) -> dict[str, Any]:
    k = max(1, n // 5)
    models = [model_name(i) for i in range(n)]
    base = pathlib.Path(tempfile.mkdtemp(prefix="mlops-fleet-"))
    try:
        repo = base / "gitops.git"
        init_repo(repo)
        writer = WriteBack(repo, backoff=Backoff(tries=5, first=0.0, cap=0.0))
        writer.commit("main", lambda root: [propose(root, m, "v1") for m in models],
                      Message(f"fleet: {n} models, v1 stable"))
        version = {m: 1 for m in models}
        failing: dict[str, float] = {}
        rollouts = 0

        def next_candidate(model: str) -> str:
            nonlocal rollouts
            version[model] += 1
            rollouts += 1
            cand = f"v{version[model]}"
            if rollouts % 3 == 0:  # one canary in three fails
                failing[f"{model}/{cand}"] = 0.2
            return cand

        first = {m: next_candidate(m) for m in models[:k]}
        standin = Standin(base, failing)
        writer.commit("main", lambda root: [propose(root, m, c) for m, c in first.items()],
                      Message(f"fleet: merge {k} canaries"))
        start = float(git(repo, "log", "-1", "--format=%ct", "main"))
        commits0, size0 = int(git(repo, "rev-list", "--count", "main")), repo_size_kb(repo)
        sim = {"now": start}
        human = base / "human"
        git(base, "clone", "-q", "-b", "main", str(repo), str(human))

        source = PrometheusSource(standin.url, "haproxy")
        rss_before = rss_mb()
        controller = Controller(ControllerConfig(repo=str(repo), workdir=base / "work",
                                                 workers=workers),
                                lambda policy: source, clock=lambda: sim["now"],
                                backoff=Backoff(tries=8, first=0.05, cap=0.5))
        pushed: dict[str, float] = {}
        attempts: list[int] = []
        inner = controller.writer.commit

        def timed_commit(*args: Any, **kw: Any) -> WriteResult:
            result = inner(*args, **kw)
            if result.commit:
                pushed[result.commit] = time.monotonic()
            attempts.append(result.attempts)
            return result

        controller.writer.commit = timed_commit  # type: ignore[method-assign]
        inner_batch = controller._write_batch

        def timed_batch(items: Any) -> Any:
            results = inner_batch(items)
            now = time.monotonic()
            for result in results:
                if result.commit:
                    pushed[result.commit] = now
            attempts.extend(r.attempts for r in results[:1])  # one push per batch
            return results

        controller._write_batch = timed_batch  # type: ignore[method-assign]

        def router() -> dict[str, dict[str, Any]]:
            states = main_states(repo, models)
            standin.set_weights({m: split_of(s) for m, s in states.items()})
            return states

        def merge_next(ended: list[str], at: float) -> None:
            """Humans merge each ended model's next candidate (plain git, racing the controller)."""
            for _ in range(20):
                git(human, "fetch", "-q", "origin")
                git(human, "reset", "-q", "--hard", "origin/main")
                for model, cand in [(m, f"v{version[m]}") for m in ended]:
                    propose(human, model, cand)
                git(human, "add", "-A")
                git(human, "commit", "-qm", f"merge candidates of {', '.join(ended)}", sim=at)
                if not git(human, "push", "-q", "origin", "HEAD:main", check=False, sim=at) and \
                        git(human, "rev-parse", "HEAD") == git(human, "ls-remote", "origin",
                                                               "refs/heads/main").split()[0]:
                    return
            raise RuntimeError("humans could not push their merge in 20 tries")

        states = router()
        ticks: list[float] = []
        idle: list[float] = []
        lags: list[float] = []
        queries: list[int] = []
        peak = rss_mb()
        pending: threading.Thread | None = None
        step = INTERVAL / ticks_per_window
        for _ in range(windows * ticks_per_window + 1):
            q0 = standin.queries()
            t0 = time.monotonic()
            outcomes = controller.tick()
            took = time.monotonic() - t0
            queries.append(standin.queries() - q0 - 0)
            ticks.append(took)
            if not any(o.committed for o in outcomes):
                idle.append(took)
            for o in outcomes:
                if o.committed and o.cause not in ("ready", "manual"):
                    lags.append(sim["now"] - o.at.timestamp() + pushed[o.committed] - t0)
            peak = max(peak, rss_mb())
            if pending is not None:
                pending.join()
                pending = None
            states = router()
            ended = [m for m, s in states.items()
                     if s.get("phase") in ("promoted", "rolled_back")]
            if ended:
                for m in ended:
                    next_candidate(m)
                standin._write_world()
                pending = threading.Thread(target=merge_next, args=(ended, sim["now"]))
                pending.start()
            sim["now"] += step
        if pending is not None:
            pending.join()
        controller.close()
        standin.stop()
        commits = int(git(repo, "rev-list", "--count", "main")) - commits0
        size = repo_size_kb(repo) - size0
        simulated = sim["now"] - start
        checked = verify(repo, set(failing))
        busy = [t for t in ticks if t not in idle]
        return {
            "models": n, "canaries": k, "workers": workers, "windows": windows,
            "ticks": len(ticks),
            "simulated_s": simulated,
            "tick_s": summary(ticks), "busy_tick_s": summary(busy), "idle_tick_s": summary(idle),
            "decision_lag_s": summary(lags),
            "queries_per_tick": {"mean": round(statistics.fmean(queries), 1),
                                 "max": max(queries),
                                 "per_busy_tick": round(statistics.fmean(
                                     [q for q, t in zip(queries, ticks) if t in busy] or [0]), 1)},
            "pushes": len(attempts), "rebase_retries": sum(a - 1 for a in attempts),
            **checked,
            "rss_mb": {"before_controller": round(rss_before, 1), "peak": round(peak, 1)},
            "repo": {"commits": commits, "packed_kb_added": size,
                     "commits_per_week": round(commits / simulated * WEEK),
                     "mb_per_week": round(size / 1024 / simulated * WEEK, 1)},
            "load_1m": os.getloadavg()[0],
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)


def sync_run(n: int, changes: int, poll: float) -> dict[str, Any]:
    """Commit -> router weight through the real local sync with N models (stand-in pods)."""
    from local.platform.haproxy import RuntimeApi

    k = max(1, n // 5)
    models = [model_name(i) for i in range(n)]
    base = pathlib.Path(tempfile.mkdtemp(prefix="mlops-fleet-sync-"))
    wd = Workdir(base / "platform")
    try:
        repo = base / "gitops.git"
        init_repo(repo)

        def documents(model: str, canary: bool, weight: int) -> list[dict[str, Any]]:
            versions = ["v1", "v2"] if canary else ["v1"]
            docs = [manifests.service(model),
                    manifests.destination_rule(model, "v1", "v2" if canary else None),
                    manifests.virtual_service(model, 100 - weight, weight, canary=canary)]
            for version in versions:
                folder = base / "models" / model / version
                folder.mkdir(parents=True, exist_ok=True)
                doc = manifests.deployment(model, version, image="img:1",
                                           model_uri=folder.as_uri(), weights_sha256="0" * 64)
                container = doc["spec"]["template"]["spec"]["containers"][0]
                container["command"], container["args"] = ["python", "-c", POD], ["--port", "8080"]
                for probe in ("startupProbe", "livenessProbe"):
                    container.pop(probe, None)
                container["readinessProbe"] = {"httpGet": {"path": "/", "port": 8080},
                                               "periodSeconds": 5}
                docs.append(doc)
            return docs

        def write_all(root: pathlib.Path) -> None:
            for i, model in enumerate(models):
                layout.write_model(root, model, documents(model, i < k, 10 if i < k else 0))

        WriteBack(repo).commit("main", write_all, Message(f"fleet: {n} models"))
        t0 = time.monotonic()
        lifecycle.up(wd, str(repo), poll_interval=poll)

        def converged() -> bool:
            doc = status_doc(wd).get("models", {})
            return len(doc) == n and all(
                v.get("ready") for m in doc.values() for v in m["versions"].values())

        wait(converged, 600, f"{n} models ready and routed", interval=0.5)
        startup = time.monotonic() - t0
        clone = base / "clone"
        git(base, "clone", "-q", "-b", "main", str(repo), str(clone))
        api = RuntimeApi(wd.admin_socket())
        rng = random.Random(7)
        latencies = []
        current = {m: 10 for m in models[:k]}
        for i in range(changes):
            model = models[i % k]
            weight = rng.choice([w for w in (5, 20, 30, 40, 60, 70, 80, 90) if w != current[model]])
            current[model] = weight
            vs = clone / "apps" / model / "virtualservice.yaml"
            vs.write_text(yaml.safe_dump(manifests.virtual_service(model, 100 - weight, weight),
                                         sort_keys=False))
            git(clone, "commit", "-qam", f"bench: {model} canary {weight}%")
            git(clone, "push", "-q", "origin", "HEAD:main")
            pushed = time.monotonic()
            while api.get_weight(model, "v2") != weight:
                if time.monotonic() - pushed > 60:
                    raise SystemExit(f"{model}: HAProxy never showed weight {weight}")
                time.sleep(0.005)
            latencies.append(time.monotonic() - pushed)
            time.sleep(0.2 + (i % 5) * 0.077)  # de-phase from the poll interval
        return {"models": n, "processes": n + k, "poll_interval_s": poll,
                "startup_s": round(startup, 1), "commit_to_router_s": summary(latencies),
                "load_1m": os.getloadavg()[0]}
    finally:
        lifecycle.down(wd)
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="1,10,100")
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--ticks-per-window", type=int, default=4)
    parser.add_argument("--sync-changes", type=int, default=10)
    parser.add_argument("--workers", type=int, default=8,
                        help="the controller's `workers` (1: the sequential pass)")
    parser.add_argument("--poll-interval", type=float, default=0.5)
    parser.add_argument("--skip-sync", action="store_true")
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "benchmarks/results/fleet.json")
    args = parser.parse_args()
    started = time.monotonic()
    results: dict[str, Any] = {
        "benchmark": "fleet", "date": dt.datetime.now(dt.timezone.utc).isoformat(
            timespec="seconds"), "machine": machine(), "interval_s": INTERVAL,
        "controller": [], "sync": []}
    for n in [int(x) for x in args.models.split(",")]:
        run = controller_run(n, args.windows, args.ticks_per_window, args.workers)
        results["controller"].append(run)
        print(json.dumps(run), flush=True)
        if not args.skip_sync:
            srun = sync_run(n, args.sync_changes, args.poll_interval)
            results["sync"].append(srun)
            print(json.dumps(srun), flush=True)
        results["wall_s"] = round(time.monotonic() - started, 1)
        args.out.parent.mkdir(parents=True, exist_ok=True)  # after each N: partial results
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"{results['wall_s']} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
