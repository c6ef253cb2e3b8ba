"""Rollback latency: from the controller's rollback decision to HAProxy sending the canary nothing.

    python benchmarks/rollback_latency.py [--rollbacks 20] [--model-dir DIR] [--poll-interval 0.5]
                                          [--on-rollback scale-to-zero|remove] [--out FILE]

Starts the real local platform (Prometheus, HAProxy, the GitOps sync, two
`mlops serve` processes) on a fresh bare GitOps repo, proposes v1 (bootstrap)
and v2 (canary at 10 %) with `approval: auto`, and runs the real controller
(`promotion.controller.Controller`, in-process, Prometheus source). Each
round: a human asks for an abort (`mlops canary abort`'s commit, not timed),
then one controller pass decides `rollback`, writes the one decision commit
and pushes it; the sync applies it. Three clocks per round:

* **decision**: when `decide()` returned the rollback (inside the pass);
* **pushed**: when the write-back's push returned;
* **weight 0**: when HAProxy's runtime API (`show servers state`, polled every
  5 ms from another thread) first shows `<model>/v2` at weight 0 -- or gone,
  which is what `--on-rollback remove` leads to.

The target (issue 6) is decision -> weight 0 <= 2 s at p95. Rounds use
`--on-rollback scale-to-zero` by default so v2's server keeps running and the
next round only needs the canary re-merged (the weight change is the same
commit either way; `remove` additionally stops the server). Between rounds
the canary is written back at 10 %, and the next round starts only once that
has settled: the sync has applied main's head, its status shows the 90/10
split ready, and HAProxy itself has v2 up at weight 10. The probe counts a
zero or missing v2 only after it has seen v2 serving, and a round whose zero
comes before its decision stops the run: a previous round's state must never
be timed as this one's (it once gave negative latencies with `remove`, when a
stale status let a round start while v2 was still gone from HAProxy).

Without `--model-dir` a tiny Paddle export (random weights, the test suite's
recipe) is used: only real, ready servers matter on this path.
Results go to benchmarks/results/rollback_latency.json (`remove`:
rollback_latency_remove.json) unless `--out` says otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pathlib
import subprocess
import sys
import threading
import time

from _platform import (  # first: it puts the repo root on sys.path
    ROOT,
    machine,
    model_version,
    percentile,
    scratch,
    start_platform,
    summary,
    tiny_model,
    wait,
    wait_for_split,
)

import promotion.controller as controller_module
from cogs.files import read_json
from contracts.artifact import read_record
from gitops import layout
from gitops.forges.local import LocalForge
from gitops.writeback import Message, WriteBack
from local.platform.haproxy import (
    RuntimeApi,
    RuntimeApiError,
    ServerState,
    parse_servers_state,
)
from local.platform.workdir import Workdir
from promotion.controller import Controller, ControllerConfig
from promotion.decision.policy import load_policy
from promotion.gitrepo import apply
from promotion.gitrepo.propose import plan_proposal, propose
from promotion.metrics.prometheus import PrometheusSource
from tests.fixtures.platform import converged

MODEL = "bench-detector"
POLICY = {"steps": [10, 50, 100], "interval": "30s", "metrics": {"preset": "haproxy"}}
SPLIT = {"v1": 90, "v2": 10}


def canary_route(api: RuntimeApi) -> tuple[str, ServerState | None]:
    """What HAProxy says of the canary now: "serving" (weight > 0), "zero", "gone", or
    "unknown" when the answer does not say (unreachable, empty, or no stable server either).

    One ``show servers state`` answer, so "gone" means the backend was listed with the
    stable server in it and without the canary -- not a garbled or empty reply.
    """
    try:
        states = parse_servers_state(api.command(f"show servers state {MODEL}"))
    except (OSError, RuntimeApiError, KeyError, ValueError):
        return "unknown", None
    servers = {s.name: s for s in states if s.backend == MODEL}
    if "v1" not in servers:
        return "unknown", None
    canary = servers.get("v2")
    if canary is None:
        return "gone", None
    return ("zero" if canary.weight == 0 else "serving"), canary


class WeightWatch(threading.Thread):
    """Polls HAProxy every 5 ms; records when this round's canary stops getting traffic.

    A zero or missing canary only counts once the watch has first seen the canary
    serving: an earlier one is the previous round's rollback, not this one's.
    """

    def __init__(self, api: RuntimeApi) -> None:
        super().__init__(daemon=True)
        self.api = api
        self.armed: float | None = None  # first sight of the canary serving
        self.seen: float | None = None  # first sight of it at 0 or gone after that
        self.how = ""
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            state, _ = canary_route(self.api)
            now = time.time()
            if state == "serving" and self.armed is None:
                self.armed = now
            elif state in ("zero", "gone") and self.armed is not None:
                self.seen, self.how = now, state
                return
            time.sleep(0.005)


def main_head(repo: pathlib.Path) -> str:
    return subprocess.run(["git", "--git-dir", str(repo), "rev-parse", "refs/heads/main"],
                          check=True, capture_output=True, text=True).stdout.strip()


def settled(wd: Workdir, api: RuntimeApi, repo: pathlib.Path) -> bool:
    """The previous round is over: the sync has applied main as it is now, its status
    (`mlops status`) shows the 90/10 split with both servers ready and up, and HAProxy's
    runtime API itself serves the canary at its weight.

    The status alone is not enough: the sync writes it after a tick's actions from what it
    observed before them, so right after a rollback it can still show the canary as it
    was (with `remove`, a server HAProxy no longer has).
    """
    status = read_json(wd.status, {}) or {}
    if status.get("applied_commit") != main_head(repo) or not converged(wd, MODEL, SPLIT):
        return False
    state, canary = canary_route(api)
    return (state == "serving" and canary is not None and canary.weight == SPLIT["v2"]
            and canary.up and canary.enabled)


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
                        help="default: benchmarks/results/rollback_latency.json, "
                             "or rollback_latency_remove.json with --on-rollback remove")
    args = parser.parse_args()
    if args.out is None:  # one results file per mode: a remove run must not replace the default's
        suffix = "_remove" if args.on_rollback == "remove" else ""
        args.out = ROOT / f"benchmarks/results/rollback_latency{suffix}.json"

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
        with scratch("mlops-rollback-bench-") as (base, wd):
            rounds = run_rounds(args, base, wd, stamps)
    finally:
        controller_module.decide = real_decide

    key = "decision_to_weight0_s"
    result = {
        "benchmark": "rollback_latency",
        "what": "seconds from the controller's rollback decision to HAProxy's runtime API "
                "showing the canary at weight 0 or gone (local platform, real git, real sync)",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "sync_poll_interval_s": args.poll_interval,
        "on_rollback": args.on_rollback,
        "rollbacks": len(rounds),
        "target": {"decision_to_weight0_p95_s": 2.0},
        **{k: summary([r[k] for r in rounds]) for k in rounds[0]},
        "meets_target": percentile([r[key] for r in rounds], 0.95) <= 2.0,
        "samples": [{k: round(v, 4) for k, v in r.items()} for r in rounds],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result[key]), "->", args.out)
    return 0


def run_rounds(args: argparse.Namespace, base: pathlib.Path, wd: Workdir,
               stamps: dict[str, float]) -> list[dict[str, float]]:
    """The platform, the two versions and the controller; then the timed rollbacks."""
    source = args.model_dir or tiny_model(base / "tiny")
    v1 = model_version(source, base / "models" / "v1", MODEL, "v1")
    v2 = model_version(source, base / "models" / "v2", MODEL, "v2")
    repo = start_platform(base, wd, args.poll_interval)
    forge, policy = LocalForge(repo), load_policy(POLICY)
    propose(v1, str(repo), forge, policy, approval="auto")
    propose(v2, str(repo), forge, policy, approval="auto")
    wait_for_split(wd, MODEL, SPLIT)

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
    rounds = []
    try:
        for i in range(args.rollbacks):
            # Nothing of the previous round may still be on its way (a late status, a
            # server being stopped or started): the probe would take it for this round's.
            wait(lambda: settled(wd, api, repo), 300, f"round {i}: the canary serving again")
            if i:
                time.sleep(0.1 + ((i - 1) % 5) * 0.083)  # de-phase from the sync's poll
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
            if watch.armed is None:
                raise SystemExit(f"round {i}: the probe never saw the canary serving")
            if watch.seen is None:
                raise SystemExit(f"round {i}: HAProxy never showed v2 at weight 0 or gone")
            if watch.seen <= stamps["decision"]:
                raise SystemExit(f"round {i}: v2 {watch.how} before the decision: "
                                 "the probe saw another round's state")
            row = {"decision_to_weight0_s": watch.seen - stamps["decision"],
                   "push_to_weight0_s": watch.seen - stamps["pushed"],
                   "decision_to_push_s": stamps["pushed"] - stamps["decision"]}
            rounds.append(row)
            print(f"rollback {i + 1:2d}: decision -> {watch.how:4s} "
                  f"{1000 * row['decision_to_weight0_s']:6.0f} ms "
                  f"(push {1000 * row['decision_to_push_s']:4.0f} ms)", flush=True)
            if i + 1 < args.rollbacks:
                restart_canary(repo, v2, policy)
    finally:
        controller.close()
    return rounds


if __name__ == "__main__":
    sys.exit(main())
