"""`mlops up`, `mlops down`, `mlops status`: the local platform (see local.platform)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
from typing import Any

from local.platform.workdir import Workdir, default_workdir, load_config
from mlops.errors import UserError


def _workdir(args: argparse.Namespace) -> Workdir:
    root = pathlib.Path(args.workdir).expanduser().resolve() if args.workdir else default_workdir()
    return Workdir(root)


def _add_workdir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workdir", metavar="DIR",
        help="platform work dir (default: $MLOPS_WORKDIR, ./.mlops if it exists, else ~/.mlops)",
    )


def register(subparsers: Any) -> None:
    up = subparsers.add_parser(
        "up", help="start the local platform (Prometheus, HAProxy, GitOps sync)",
        description="Start Prometheus, HAProxy and the sync loop for a GitOps repo; "
        "reuses whatever is already running in the work dir.",
    )
    _add_workdir(up)
    up.add_argument("--gitops", metavar="REPO", help="GitOps repo (bare repo path or URL); "
                    "needed on the first `up` of a work dir")
    up.add_argument("--controller-port", type=int, metavar="PORT",
                    help="let Prometheus scrape the promotion controller's /metrics on this port")
    up.add_argument("--poll-interval", type=float, metavar="SECONDS",
                    help="how often the sync polls the GitOps repo (default 0.5)")
    up.add_argument("--sync-delay", type=float, metavar="SECONDS",
                    help="cluster-latency mode: apply a commit only once it has been on main "
                         "this long (Argo CD polls every 180 s); default 0")
    up.add_argument("--start-delay", type=float, metavar="SECONDS",
                    help="cluster-latency mode: a new model server is not probed (so not ready, "
                         "not routed) before this long after its start (image pull); default 0")
    up.add_argument("--json", action="store_true", help="print the result as JSON")
    up.set_defaults(func=_up)

    down = subparsers.add_parser("down", help="stop every process of the local platform")
    _add_workdir(down)
    down.set_defaults(func=_down)

    status = subparsers.add_parser("status", help="models, weights, applied commit, process health")
    _add_workdir(status)
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.add_argument(
        "--runs", action="append", metavar="DIR", default=[],
        help="also show pipeline runs: a hook's runs dir (<bare repo>/mlops-runs) or one "
             "run's --out dir; repeatable. With --runs only, no platform is needed")
    status.set_defaults(func=_status)


def _up(args: argparse.Namespace) -> int:
    from local.platform import lifecycle

    workdir = _workdir(args)
    result = lifecycle.up(workdir, args.gitops, controller_port=args.controller_port,
                          poll_interval=args.poll_interval, sync_delay=args.sync_delay,
                          start_delay=args.start_delay)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    config = result["config"]
    print(f"platform up in {result['workdir']}")
    if result["started"]:
        print(f"  started: {', '.join(result['started'])}")
    if result["reused"]:
        print(f"  already running: {', '.join(result['reused'])}")
    print(f"  GitOps repo:   {config['gitops']} ({config['branch']})")
    print(f"  Prometheus:    http://127.0.0.1:{config['prometheus_port']}")
    print(f"  HAProxy stats: http://127.0.0.1:{config['haproxy_stats_port']}/stats")
    print("  `mlops status` shows models and weights once the sync has applied the repo.")
    print(f"  web UI:        `mlops ui --workdir {result['workdir']}` serves it at "
          "http://127.0.0.1:8765/")
    return 0


def _down(args: argparse.Namespace) -> int:
    from local.platform import lifecycle

    result = lifecycle.down(_workdir(args))
    stopped = ", ".join(result["stopped"]) or "nothing was running"
    print(f"platform down in {result['workdir']}: {stopped}")
    return 0


def _fmt_weight(value: Any) -> str:
    return "-" if value is None else f"{value}%"


def _runs(dirs: list[str]) -> list[dict[str, Any]]:
    from workflows import run_events

    runs = []
    for directory in dirs:
        path = pathlib.Path(directory).expanduser()
        if not path.is_dir():
            raise UserError(f"--runs {directory}: no such directory")
        runs += [dataclasses.asdict(summary) for summary in run_events.scan(path)]
    return runs


def _print_runs(runs: list[dict[str, Any]]) -> None:
    print(f"\npipeline runs: {len(runs)}")
    for run in runs:
        took = "" if run["seconds"] is None else f"{run['seconds']:.0f}s"
        where = {"Running": f"at {run['task'] or '-'}",
                 "Failed": f"at {run['task']}: {run['message']}",
                 "Error": f"at {run['task']}: {run['message']}",
                 "Died": "without finishing: its process is gone; see its run.log",
                 }.get(run["status"], "")
        gate = f"gate {run['gate']}" if run["gate"] else ""
        version = f"version {run['version']}" if run["version"] else ""
        detail = ", ".join(part for part in (version, gate, where) if part)
        print(f"  {run['name']:<14}{run['status']:<11}{took:>7}  {detail}")
        print(f"  {'':<14}{run['out']}")


def _status(args: argparse.Namespace) -> int:
    from local.platform import lifecycle

    runs = _runs(args.runs)
    workdir = _workdir(args)
    if args.runs and not args.workdir and load_config(workdir) is None:
        # runs only: a model repo's pushes can be followed without a platform
        if args.json:
            print(json.dumps({"runs": runs}, indent=2, sort_keys=True))
        else:
            _print_runs(runs)
        return 0
    doc = lifecycle.status(workdir)
    if args.runs:
        doc["runs"] = runs
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
        return 0
    print(f"work dir:   {doc['workdir']}")
    print(f"GitOps:     {doc['gitops']} ({doc['branch']})")
    applied = doc["applied_commit"] or "none yet"
    print(f"applied:    {applied[:12]}" + (
        f"  (newest seen {doc['seen_commit'][:12]} is REFUSED, see ERROR below)"
        if doc["seen_commit"] and doc["seen_commit"] != doc["applied_commit"] else ""))
    tip = doc.get("tip_commit")
    if tip and tip not in (doc["applied_commit"], doc["seen_commit"]):
        print(f"main's tip: {tip[:12]}  (not applied yet: the sync applies a commit "
              f"{doc.get('sync_delay') or 0:g} s after it sees it)")
    for name, svc in doc["services"].items():
        state = f"running (pid {svc['pid']})" if svc["running"] else "NOT RUNNING"
        if svc.get("restarts"):
            state += f", restarted {svc['restarts']}x by the sync"
        print(f"{name + ':':<12}{state}")
    down = [name for name, svc in doc["services"].items() if not svc["running"]]
    if down:
        print(f"hint: {', '.join(down)} not running; `mlops up` starts what is missing")
    if doc["services"]["sync"]["running"] and not doc["sync_fresh"]:
        print("warning: the sync has not written its status for 10 s")
    print(f"Prometheus: {doc['urls']['prometheus']}")
    print(f"HAProxy:    {doc['urls']['haproxy_stats']}")
    for error in doc["errors"]:
        message = error["message"]
        where = "" if error["file"] in message else f"{error['file']}: "
        print(f"ERROR {where}{message} (keeping the last good state)")
    if doc["git_error"]:
        print(f"ERROR reading the GitOps repo: {doc['git_error']}")
    if not doc["models"]:
        print("no models yet")
    for model, info in sorted(doc["models"].items()):
        print(f"\nmodel {model}  {info.get('url') or '(no frontend yet)'}")
        print(f"  {'version':<20}{'weight':>8}{'haproxy':>9}  {'phase':<9}{'ready':<6}{'up':<4}"
              f"{'pid':>8}{'port':>7}{'restarts':>9}")
        for version, v in sorted(info["versions"].items()):
            up = {True: "yes", False: "no", None: "-"}[v.get("haproxy_up")]
            print(f"  {version:<20}{_fmt_weight(v.get('desired_weight')):>8}"
                  f"{_fmt_weight(v.get('haproxy_weight')):>9}  {v['phase']:<9}"
                  f"{'yes' if v.get('ready') else 'no':<6}{up:<4}"
                  f"{v['pid'] or '-':>8}{v['port'] or '-':>7}{v['restarts']:>9}")
            if v["phase"] != "ready" and v.get("not_ready_reason"):
                print(f"    not ready: {v['not_ready_reason']}")
            if v.get("desired_weight") is None and v.get("haproxy_weight"):
                print("    serving until a version of the new split is ready "
                      "(make-before-break)")
            successor = v.get("successor")
            if successor:  # a changed pod: the new process starts beside this one
                why = successor.get("not_ready_reason")
                print(f"    new pod {successor.get('phase')} on port {successor.get('port')}"
                      + (f": {why}" if why else ""))
            if v["phase"] != "ready" and v.get("last_exit"):
                looping = "CRASH LOOP, " if v.get("restarts", 0) >= 3 else ""
                print(f"    {looping}last exit: {v['last_exit']}; log: {v.get('log')}")
    prs = doc.get("pull_requests")
    if isinstance(prs, list):
        print(f"\nopen pull requests: {len(prs)}")
        for pr in prs:
            if isinstance(pr, dict) and "number" in pr:
                print(f"  #{pr['number']:<4} {pr.get('branch', '')}  {pr.get('title', '')}")
            else:
                print(f"  {pr}")
    elif isinstance(prs, dict) and prs.get("error"):
        print(f"\nopen pull requests: cannot list ({prs['error']})")
    if args.runs:
        _print_runs(runs)
    return 0
