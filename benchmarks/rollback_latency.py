"""Rollback latency: from the controller's rollback decision to HAProxy sending the canary nothing.

    python benchmarks/rollback_latency.py [--rollbacks 20] [--model-dir DIR] [--poll-interval 0.5]

Starts the real local platform (Prometheus, HAProxy, the GitOps sync, two
`mlops serve` processes) on a fresh bare GitOps repo, proposes v1 (bootstrap)
and v2 (canary at 10 %) with `approval: auto`, and runs the real controller
(`promotion.controller.Controller`, in-process, Prometheus source). Each
round: a human asks for an abort (`mlops canary abort`'s commit, not timed),
then one controller pass decides `rollback`, writes the one decision commit
and pushes it; the sync applies it. Three clocks per round:

* **decision**: when `decide()` returned the rollback (inside the pass);
* **pushed**: when the write-back's push returned;
* **weight 0**: when HAProxy's runtime API first answers `get weight
  <model>/v2` with 0 (polled every 5 ms from another thread) -- or says the
  server is gone, which is what `--on-rollback remove` leads to.

The target (issue 6) is decision -> weight 0 <= 2 s at p95. Rounds use
`--on-rollback scale-to-zero` by default so v2's server keeps running and the
next round only needs the canary re-merged (the weight change is the same
commit either way; `remove` additionally stops the server). Between rounds
the canary state is written back to 10 % and the split re-converges.

Without `--model-dir` a tiny Paddle export (random weights, the test suite's
recipe) is used: only real, ready servers matter on this path.
Results go to benchmarks/results/rollback_latency.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import promotion.controller as controller_module  # noqa: E402
from gitops import layout  # noqa: E402
from gitops.forges.local import LocalForge  # noqa: E402
from gitops.repo import init_repo  # noqa: E402
from gitops.writeback import Message, WriteBack  # noqa: E402
from mlops.platform import lifecycle  # noqa: E402
from mlops.platform.files import read_json  # noqa: E402
from mlops.platform.runtime import RuntimeApi, RuntimeApiError  # noqa: E402
from mlops.platform.workdir import Workdir  # noqa: E402
from promotion import apply  # noqa: E402
from promotion.controller import Controller, ControllerConfig  # noqa: E402
from promotion.metrics.prometheus import PrometheusSource  # noqa: E402
from promotion.policy import load_policy  # noqa: E402
from promotion.propose import plan_proposal, propose, read_record  # noqa: E402
from tests.fixtures.platform import converged  # noqa: E402

MODEL = "bench-detector"
POLICY = {"steps": [10, 50, 100], "interval": "30s", "metrics": {"preset": "haproxy"}}


def tiny_model(dest: pathlib.Path) -> pathlib.Path:
    """A tiny random-weight Paddle export (the serving tests' recipe)."""
    from tests.fixtures.serving import _TINY_EXPORT, TINY_INFER_CFG, server_env

    dest.mkdir(parents=True)
    script = dest.parent / "export_tiny.py"  # paddle.jit.save reads the source: not `-c`
    script.write_text(_TINY_EXPORT)
    subprocess.run([sys.executable, str(script), str(dest / "inference")],
                   check=True, capture_output=True, env=server_env(), timeout=300)
    (dest / "infer_cfg.yml").write_text(yaml.safe_dump(TINY_INFER_CFG, sort_keys=False))
    return dest


def version_dir(src: pathlib.Path, dest: pathlib.Path, version: str) -> pathlib.Path:
    shutil.copytree(src, dest)
    sha = hashlib.sha256((dest / "inference.pdiparams").read_bytes()).hexdigest()
    (dest / "model.yaml").write_text(yaml.safe_dump(
        {"name": MODEL, "version": version, "weights_sha256": sha,
         "metrics": {"map50": 0.5}}, sort_keys=False))
    return dest


def wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


class WeightWatch(threading.Thread):
    """Polls HAProxy every 5 ms; records when the canary's weight is 0 (or it is gone)."""

    def __init__(self, api: RuntimeApi) -> None:
        super().__init__(daemon=True)
        self.api = api
        self.seen: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                zero = self.api.get_weight(MODEL, "v2") == 0
            except RuntimeApiError:
                zero = True  # `del server` happened: no traffic either
            except OSError:
                zero = False
            if zero:
                self.seen = time.time()
                return
            time.sleep(0.005)


def restart_canary(repo: pathlib.Path, v2: pathlib.Path, policy) -> None:
    """Write the canary of v2 at 10 % back onto main (a re-merged proposal)."""
    def change(root: pathlib.Path) -> None:
        current = layout.read_model(root, MODEL)
        the_plan = plan_proposal(read_record(v2), current, policy, image="img",
                                 model_uri=v2.resolve().as_uri())
        the_plan.write(root)

    WriteBack(repo).commit("main", change, Message(f"bench({MODEL}): canary v2 at 10% again"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollbacks", type=int, default=20)
    parser.add_argument("--model-dir", type=pathlib.Path)
    parser.add_argument("--poll-interval", type=float, default=0.5,
                        help="the sync's poll interval (seconds)")
    parser.add_argument("--on-rollback", choices=["scale-to-zero", "remove"],
                        default="scale-to-zero")
    parser.add_argument("--out", type=pathlib.Path,
                        default=ROOT / "benchmarks/results/rollback_latency.json")
    args = parser.parse_args()

    base = pathlib.Path(tempfile.mkdtemp(prefix="mlops-rollback-bench-"))
    wd = Workdir(base / "platform")
    rounds: list[dict[str, float]] = []
    stamps: dict[str, float] = {}
    real_decide = controller_module.decide

    def timed_decide(*a, **kw):
        decision = real_decide(*a, **kw)
        if decision.kind == "rollback":
            stamps["decision"] = time.time()
        return decision

    controller_module.decide = timed_decide
    try:
        source = args.model_dir or tiny_model(base / "tiny")
        v1 = version_dir(source, base / "models" / "v1", "v1")
        v2 = version_dir(source, base / "models" / "v2", "v2")
        repo = base / "gitops.git"
        init_repo(repo)
        lifecycle.up(wd, str(repo), poll_interval=args.poll_interval)
        forge, policy = LocalForge(repo), load_policy(POLICY)
        propose(v1, str(repo), forge, policy, approval="auto")
        propose(v2, str(repo), forge, policy, approval="auto")
        print("waiting for two model servers and the 90/10 split ...", flush=True)
        wait(lambda: converged(wd, MODEL, {"v1": 90, "v2": 10}), 300, "the 90/10 split")

        prometheus = f"http://127.0.0.1:{read_json(wd.config)['prometheus_port']}"
        controller = Controller(
            ControllerConfig(repo=str(repo), workdir=base / "controller",
                             on_rollback=args.on_rollback),
            PrometheusSource(prometheus, "haproxy"))
        push = controller.writer.commit

        def timed_commit(*a, **kw):
            result = push(*a, **kw)
            stamps["pushed"] = time.time()
            return result

        controller.writer.commit = timed_commit  # type: ignore[method-assign]
        api = RuntimeApi(wd.admin_socket())
        human = WriteBack(repo)
        for i in range(args.rollbacks):
            apply.human_commit(human, "main", MODEL, "abort", "bench",
                               dt.datetime.now(dt.timezone.utc))
            stamps.clear()
            watch = WeightWatch(api)
            watch.start()
            outcomes = controller.tick()
            if not any(o.kind == "rollback" and o.committed for o in outcomes):
                raise SystemExit(f"round {i}: no rollback committed: {outcomes}")
            watch.join(timeout=30)
            watch.stop.set()
            if watch.seen is None:
                raise SystemExit(f"round {i}: HAProxy never showed weight 0 for v2")
            row = {"decision_to_weight0_s": watch.seen - stamps["decision"],
                   "push_to_weight0_s": watch.seen - stamps["pushed"],
                   "decision_to_push_s": stamps["pushed"] - stamps["decision"]}
            rounds.append(row)
            print(f"rollback {i + 1:2d}: decision -> weight 0 "
                  f"{1000 * row['decision_to_weight0_s']:6.0f} ms "
                  f"(push {1000 * row['decision_to_push_s']:4.0f} ms)", flush=True)
            if i + 1 < args.rollbacks:
                restart_canary(repo, v2, policy)
                wait(lambda: converged(wd, MODEL, {"v1": 90, "v2": 10}), 300, "the split again")
                time.sleep(0.1 + (i % 5) * 0.083)  # de-phase from the sync's poll interval
        controller.close()
    finally:
        controller_module.decide = real_decide
        lifecycle.down(wd)
        shutil.rmtree(base, ignore_errors=True)

    def summary(key: str) -> dict[str, float]:
        values = [r[key] for r in rounds]
        return {"p50": round(statistics.median(values), 4),
                "p95": round(percentile(values, 0.95), 4),
                "max": round(max(values), 4), "mean": round(statistics.fmean(values), 4)}

    result = {
        "benchmark": "rollback_latency",
        "what": "seconds from the controller's rollback decision to HAProxy's `get weight` "
                "showing 0 for the canary (local platform, real git, real sync)",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_1m": os.getloadavg()[0]},
        "sync_poll_interval_s": args.poll_interval,
        "on_rollback": args.on_rollback,
        "rollbacks": len(rounds),
        "target": {"decision_to_weight0_p95_s": 2.0},
        "decision_to_weight0_s": summary("decision_to_weight0_s"),
        "push_to_weight0_s": summary("push_to_weight0_s"),
        "decision_to_push_s": summary("decision_to_push_s"),
        "meets_target": percentile([r["decision_to_weight0_s"] for r in rounds], 0.95) <= 2.0,
        "samples": [{k: round(v, 4) for k, v in r.items()} for r in rounds],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["decision_to_weight0_s"]), "->", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
