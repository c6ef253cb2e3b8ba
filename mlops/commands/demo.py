"""`mlops demo`: the whole story on one machine, as a person would type it.

1. a GitOps repo and the local platform (Prometheus, HAProxy, the sync loop);
2. the pipeline on the example (smoke + 2-process training, mAP, gate), which
   proposes v1 as a pull request; approving it makes v1 the stable version;
3. a retrain (v2: two more epochs warm-started from v1's checkpoint, the
   weekly-retrain story), proposed and approved: the canary starts at 10 %;
4. the promotion controller steps the canary from Prometheus metrics while
   the load generator sends real images through HAProxy, one git commit per
   decision, until v2 is promoted or rolled back;
5. the GitOps history, which tells the whole story.

Every command is printed before it runs, so the demo doubles as a tutorial.
Each stage is idempotent: re-running the demo on the same work dir reuses
trained models and open pull requests.
"""

import argparse
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

import yaml

from mlops.errors import UserError

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shapes-detector"
MODEL = "shapes-detector"


class DemoError(UserError):
    """A demo stage failed; the message says which and where its log is."""

    exit_code = 1


def _say(text: str) -> None:
    print(f"\n=== {text}", flush=True)


def _mlops(*args: str, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "mlops", *args]
    print("$ mlops " + " ".join(shlex.quote(a) for a in args), flush=True)
    proc = subprocess.run(argv, **kwargs)
    if check and proc.returncode != 0:
        raise DemoError(f"`mlops {' '.join(args)}` exited with {proc.returncode}")
    return proc


def _git(repo: pathlib.Path, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def _promotion_state(gitops: pathlib.Path) -> dict[str, Any]:
    try:
        text = _git(gitops, "show", f"main:apps/{MODEL}/promotion.yaml")
    except subprocess.CalledProcessError:
        return {}
    return yaml.safe_load(text) or {}


def _open_pr_for(gitops: pathlib.Path, version: str) -> int | None:
    from gitops.forges.local import list_open

    for pr in list_open(gitops):
        if version in (pr.get("branch") or "") or version in (pr.get("title") or ""):
            return int(pr["number"])
    return None


def _model_version(run_dir: pathlib.Path) -> str:
    record = yaml.safe_load((run_dir / "full" / "model" / "model.yaml").read_text())
    return str(record["version"])


def _prepare_retrain_repo(work: pathlib.Path, v1_run: pathlib.Path, extra_epochs: int) -> pathlib.Path:
    """A copy of the example whose full job trains `extra_epochs` more, from v1's checkpoint."""
    repo = work / "model-repo-v2"
    if not repo.exists():
        shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("data", "__pycache__"))
        data = EXAMPLE / "data"
        if data.exists():
            (repo / "data").symlink_to(data.resolve(), target_is_directory=True)
    config = yaml.safe_load((EXAMPLE / "mlops.yaml").read_text())
    v1_epochs = int(yaml.safe_load((v1_run / "full" / "model" / "model.yaml").read_text())
                    .get("hyperparameters", {}).get("epochs", 10))
    full = config["training"]["full"]
    full.setdefault("overrides", {}).setdefault("args", {})["epochs"] = v1_epochs + extra_epochs
    (repo / "mlops.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    ckpt = work / "runs" / "v2" / "full" / "checkpoints"
    if not ckpt.exists():
        shutil.copytree(v1_run / "full" / "checkpoints", ckpt)
    return repo


def _demo_canary_policy(args: argparse.Namespace) -> dict[str, Any]:
    # A demo-sized policy: short windows, fewer requests per step.
    return {"interval": args.interval, "min_requests": args.min_requests,
            "steps": [10, 25, 50, 100]}


def _wait_until_served(workdir: pathlib.Path, weights: dict[str, int], timeout: float) -> None:
    from mlops.platform import lifecycle
    from mlops.platform.workdir import Workdir

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = lifecycle.status(Workdir(workdir))
        versions = doc.get("models", {}).get(MODEL, {}).get("versions", {})
        live = {v: info.get("haproxy_weight") for v, info in versions.items()
                if info.get("phase") == "ready" and info.get("haproxy_up")}
        if all(live.get(v) == w for v, w in weights.items()) and set(live) >= set(weights):
            return
        time.sleep(1)
    raise DemoError(f"the platform did not serve {weights} within {timeout:.0f}s; see `mlops status`")


def _frontend(workdir: pathlib.Path) -> str:
    from mlops.platform import lifecycle
    from mlops.platform.workdir import Workdir

    return str(lifecycle.status(Workdir(workdir))["models"][MODEL]["url"])


def _run_pipeline(repo: pathlib.Path, out: pathlib.Path, gitops: pathlib.Path) -> None:
    if (out / "full" / "gate.json").is_file() and (out / "full" / "model" / "model.yaml").is_file():
        print(f"(reusing the finished run in {out})")
        return
    _mlops("run", str(repo), "--out", str(out), "--param", f"gitops-repo={gitops}")


def _approve(gitops: pathlib.Path, version: str) -> None:
    state = _promotion_state(gitops)
    if version in (state.get("stable"), state.get("candidate")):
        print(f"({version} is already approved)")
        return
    number = _open_pr_for(gitops, version)
    if number is None:
        raise DemoError(f"no open pull request proposes {version}; see `mlops pr list --repo {gitops}`")
    _mlops("pr", "show", str(number), "--repo", str(gitops))
    print("(the demo plays the reviewer and approves)")
    _mlops("pr", "approve", str(number), "--repo", str(gitops))


def _run_canary(args: argparse.Namespace, work: pathlib.Path, gitops: pathlib.Path,
                platform: pathlib.Path, prometheus: str, v2: str) -> dict[str, Any]:
    url = _frontend(platform)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    controller_cmd = [
        sys.executable, "-m", "mlops", "controller", "run", "--gitops", str(gitops),
        "--prometheus", prometheus, "--preset", args.preset, "--interval", str(args.interval),
        "--workdir", str(work / "controller"),
    ]
    load_cmd = [
        sys.executable, "-m", "mlops", "load", url, "--rps", str(args.rps),
        "--duration", str(args.timeout), "--images", str(EXAMPLE / "data" / "val"),
        "--json", str(work / "load.json"),
    ]
    procs: list[subprocess.Popen] = []
    try:
        for cmd, log in ((load_cmd, "load.log"), (controller_cmd, "controller.log")):
            print("$ " + " ".join(shlex.quote(c) for c in ["mlops", *cmd[3:]]) + f"  > {logs / log} &")
            procs.append(subprocess.Popen(cmd, stdout=open(logs / log, "wb"),
                                          stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + args.timeout
        last = None
        while time.monotonic() < deadline:
            state = _promotion_state(gitops)
            summary = (state.get("phase"), state.get("weight"), state.get("stable"))
            if summary != last:
                print(f"  phase={summary[0]} canary weight={summary[1]}% stable={summary[2]}",
                      flush=True)
                last = summary
            if state.get("phase") in ("rolled_back",) or (
                state.get("stable") == v2 and state.get("phase") in ("idle", "promoted")
            ):
                return state
            for proc in procs:
                if proc.poll() is not None and proc is procs[1]:
                    raise DemoError(f"the controller exited; see {logs / 'controller.log'}")
            time.sleep(2)
        raise DemoError(f"the canary did not finish within {args.timeout}s; "
                        f"see {logs / 'controller.log'} and `mlops status`")
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _demo(args: argparse.Namespace) -> int:
    from gitops.repo import init_repo
    from mlops.platform import lifecycle
    from mlops.platform.workdir import Workdir

    work = pathlib.Path(args.workdir).resolve()
    if args.fresh and work.exists():
        if (work / "platform").exists():
            lifecycle.down(Workdir(work / "platform"))
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    gitops = work / "gitops.git"
    platform = work / "platform"
    started = time.monotonic()

    _say("1. GitOps repo and local platform (Prometheus, HAProxy, sync loop)")
    if not gitops.exists():
        _mlops("gitops", "init", str(gitops))
    _mlops("up", "--workdir", str(platform), "--gitops", str(gitops))
    prometheus = lifecycle.status(Workdir(platform))["urls"]["prometheus"]
    try:
        _say("2. Pipeline on the example: smoke + 2-process training, mAP, gate, propose v1")
        t0 = time.monotonic()
        v1_run = work / "runs" / "v1"
        _run_pipeline(EXAMPLE, v1_run, gitops)
        v1 = _model_version(v1_run)
        print(f"pipeline took {time.monotonic() - t0:.0f}s; candidate {v1}")
        _approve(gitops, v1)
        _wait_until_served(platform, {v1: 100}, args.timeout)
        print(f"{v1} serves 100% at {_frontend(platform)}")

        _say("3. Retrain: v2 = two more epochs from v1's checkpoint, proposed as a canary")
        repo_v2 = _prepare_retrain_repo(work, v1_run, extra_epochs=2)
        config = yaml.safe_load((repo_v2 / "mlops.yaml").read_text())
        config.setdefault("promotion", {})["canary"] = _demo_canary_policy(args)
        (repo_v2 / "mlops.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        v2_run = work / "runs" / "v2"
        _run_pipeline(repo_v2, v2_run, gitops)
        v2 = _model_version(v2_run)
        if v2 == v1:
            raise DemoError("the retrain produced the same weights as v1; nothing to canary")
        _approve(gitops, v2)
        _wait_until_served(platform, {v1: 90, v2: 10}, args.timeout)

        _say(f"4. Canary: the controller steers {v2} from Prometheus metrics under real load")
        final = _run_canary(args, work, gitops, platform, prometheus, v2)
        verdict = "promoted" if final.get("stable") == v2 else "rolled back"
        print(f"{v2} was {verdict}")

        _say("5. The GitOps history tells the story (one commit per decision)")
        print(_git(gitops, "log", "--format=%h %an  %s", "main"))
        _mlops("status", "--workdir", str(platform), check=False)
        reports = sorted((work / "controller" / "rollouts").glob(f"{MODEL}/*/report.md"))
        for report in reports[-1:]:
            print(f"canary report: {report}")
        print(f"\ndemo finished in {time.monotonic() - started:.0f}s; work dir {work}")
    finally:
        if not args.keep_running:
            _say("Stopping the local platform")
            _mlops("down", "--workdir", str(platform), check=False)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `mlops demo`."""
    parser = subparsers.add_parser(
        "demo", help="the whole story on this machine: train, propose, approve, canary, promote"
    )
    parser.add_argument("--workdir", default=".mlops-demo", help="where everything goes")
    parser.add_argument("--fresh", action="store_true", help="start from an empty work dir")
    parser.add_argument("--keep-running", action="store_true",
                        help="leave the platform up at the end (stop it with `mlops down`)")
    parser.add_argument("--rps", type=float, default=40.0, help="load through HAProxy")
    parser.add_argument("--interval", type=float, default=10.0, help="canary analysis window, s")
    parser.add_argument("--min-requests", type=int, default=100,
                        help="canary requests needed per step")
    parser.add_argument("--preset", default="haproxy", help="metric preset (haproxy|model)")
    parser.add_argument("--timeout", type=float, default=900.0, help="per-stage limit, s")
    parser.set_defaults(func=_demo)
