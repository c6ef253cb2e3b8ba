"""The demo's story, played with real git, Prometheus, HAProxy and Paddle.

Bare model and GitOps repos, the local platform and the controller; a `git push` of the
example whose candidate is gated, proposed, approved (or awaited, `--wait-approval`) and
served under a steady load; per scenario (`scenarios`) one more push, a canary shown as
it moves until promoted or rolled back; then `summary.json`, the GitOps history and the
reports. Everything it starts carries the work dir's marker, so `mlops down` stops it
all, and everything it writes stays inside the work dir.
"""

import argparse
import json
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

from cogs.ports import free_port
from contracts.artifact import ArtifactError, read_record_data
from contracts.errors import ExitCode
from gitops.forges.local import list_open
from local.platform import lifecycle, procs
from local.platform.workdir import Workdir
from mlops.demo import modelrepo, scenarios, timeline, watch
from mlops.errors import UserError
from promotion.decision.state import CanaryState, Phase, load_state
from promotion.errors import StateError
from workflows import run_events

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / scenarios.DEFAULT_EXAMPLE  # `--example` picks another
MODEL = scenarios.DEFAULT_EXAMPLE
#: What a demo creates in its work dir; a new run removes exactly these.
OWNED = ("model.git", "model", "gitops.git", "platform", "runs", "controller", "logs",
         "tmp", "cache", "datasets", "summary.json")


class DemoError(UserError):
    """A stage failed or a scenario ended otherwise than expected; says where to look."""

    exit_code = ExitCode.FAILED


class Demo:
    """One play of the story in one work dir."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.example = scenarios.example(getattr(args, "example", scenarios.DEFAULT_EXAMPLE))
        self.example_dir = ROOT / "examples" / self.example.name
        self.model = self.example.name  # the example's mlops.yaml `model:`
        self.work = pathlib.Path(args.workdir).expanduser().resolve()
        self.model_bare = self.work / "model.git"
        self.clone = self.work / "model"
        self.gitops = self.work / "gitops.git"
        self.platform = self.work / "platform"
        self.runs = self.work / "runs"
        self.logs = self.work / "logs"
        self.controller_dir = self.work / "controller"
        # The team's shared storage (a NAS or a bucket in real life): one dataset per week.
        self.datasets = self.work / "datasets" / self.example.name
        self.generator_args: list[str] = []  # e.g. ["--num-train", "32"]: a smaller dataset
        self.started = time.monotonic()
        self.results: list[dict[str, Any]] = []
        self.background: list[subprocess.Popen] = []
        # Every push trains with the example's weights cache in the work dir, so the drill
        # pushes (serving flags only) reuse the weights of the production they copy.
        self.production_args: dict[str, Any] = {
            "weights-cache": str(self.work / "cache" / "weights")}
        if getattr(args, "seed", None) is not None:  # every push trains with this seed
            self.production_args["seed"] = args.seed
        self.tty = sys.stdout.isatty()

    # -- narration and commands --------------------------------------------------------------

    def say(self, text: str) -> None:
        print(f"\n=== {text}  [{self.elapsed()}]", flush=True)

    def elapsed(self) -> str:
        seconds = int(time.monotonic() - self.started)
        return f"{seconds // 60}:{seconds % 60:02d}"

    def env(self) -> dict[str, str]:
        """Children's environment: the platform marker, and temp/cache dirs in the work dir."""
        env = procs.marked_env(str(self.platform))
        # Bytecode goes to the work dir's cache (below), so it must be written: with the prefix
        # set, Python reads no __pycache__ outside it, and under PYTHONDONTWRITEBYTECODE (set in
        # many CI and container environments) nothing was ever cached there, so every training
        # rank, launcher, server and command compiled paddle and the rest from source again
        # (`import paddle` cost about four times as much).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.update({
            "TMPDIR": str(self.work / "tmp"),
            "MPLCONFIGDIR": str(self.work / "cache" / "matplotlib"),
            "XDG_CACHE_HOME": str(self.work / "cache"),
            "MLOPS_DATA_CACHE": str(self.work / "cache" / "data"),  # prepare-data's
            "PYTHONPYCACHEPREFIX": str(self.work / "cache" / "pycache"),
            "GIT_CONFIG_NOSYSTEM": "1",
        })
        return env

    def mlops(self, *args: str, check: bool = True, quiet: bool = False,
              marked: bool = True) -> subprocess.CompletedProcess:
        shown = ["mlops", *(self.short(a) for a in args)]
        print("$ " + " ".join(shlex.quote(a) for a in shown), flush=True)
        proc = subprocess.run([sys.executable, "-m", "mlops", *args], text=True,
                              env=self.env() if marked else None, cwd=self.work,
                              capture_output=quiet)
        if check and proc.returncode != 0:
            detail = f"\n{proc.stdout}{proc.stderr}" if quiet else ""
            raise DemoError(f"`{' '.join(shown)}` exited with {proc.returncode}{detail}")
        return proc

    def git(self, *args: str, show: bool = True) -> str:
        if show:
            print("$ git " + " ".join(shlex.quote(self.short(a)) for a in args), flush=True)
        proc = subprocess.run(["git", *args], cwd=self.clone, env=self.env(), text=True,
                              capture_output=True)
        if proc.returncode != 0:
            raise DemoError(f"git {' '.join(args)} failed:\n{proc.stderr.strip()}")
        output = (proc.stdout + proc.stderr).strip()
        if show and output:
            print("\n".join("  " + line for line in output.splitlines()), flush=True)
        return proc.stdout

    def short(self, text: str) -> str:
        """Paths inside the work dir, shown relative to it (the demo runs there)."""
        return text.replace(str(self.work) + "/", "")

    def spawn(self, name: str, *args: str) -> subprocess.Popen:
        log = self.logs / f"{name}.log"
        print("$ " + " ".join(shlex.quote(a) for a in ["mlops", *(self.short(x) for x in args)])
              + f"  > logs/{name}.log &", flush=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "mlops", *args], cwd=self.work,
                                    stdout=out, stderr=subprocess.STDOUT, env=self.env(),
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.background.append(proc)
        return proc

    # -- 1. set-up -----------------------------------------------------------------------------

    def reset(self) -> None:
        """Stop a previous demo in this work dir and remove what it made (only that)."""
        if (self.platform / "config.json").exists() or self.platform.exists():
            try:
                lifecycle.down(Workdir(self.platform))
            except Exception as exc:  # noqa: BLE001 - a half-made platform must not block a new run
                print(f"(previous platform: {exc})")
        removed = [name for name in OWNED if (self.work / name).exists()]
        for name in removed:
            path = self.work / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        if removed:
            print(f"(removed the previous demo's {', '.join(removed)} from {self.work})")

    def set_up(self) -> None:
        self.say("1. Repos and the local platform")
        self.work.mkdir(parents=True, exist_ok=True)
        self.reset()
        for path in (self.logs, self.work / "tmp", self.work / "cache"):
            path.mkdir(parents=True, exist_ok=True)
        print(f"work dir: {self.work}  (every command below runs there)")
        self.mlops("gitops", "init", str(self.gitops))
        # The hook binds the repo to its model and GitOps repo, as a cluster's push template
        # does: a push naming another model or GitOps repo is refused (docs/security.md).
        self.mlops("hooks", "init-bare", str(self.model_bare), "--gitops", str(self.gitops),
                   "--model", self.model, "--runs-dir", str(self.runs))
        controller_port = free_port()
        self.mlops("up", "--workdir", str(self.platform), "--gitops", str(self.gitops),
                   "--controller-port", str(controller_port))
        self.prometheus = lifecycle.status(Workdir(self.platform))["urls"]["prometheus"]
        self.controller = self.spawn(
            "controller", "controller", "run", "--gitops", str(self.gitops),
            "--prometheus", self.prometheus,
            *(["--preset", self.args.preset] if self.args.preset else []),
            "--workdir", str(self.controller_dir), "--metrics-port", str(controller_port),
            # A merged canary gets traffic once the platform reports it ready, as the
            # Kubernetes API would in a cluster (`--readiness kubernetes`).
            "--readiness", "local", "--platform-workdir", str(self.platform))
        self.runs.mkdir(parents=True, exist_ok=True)
        ui_port = free_port()
        self.ui = self.spawn("ui", "ui", "--workdir", str(self.platform), "--runs", str(self.runs),
                             "--reports", str(self.controller_dir), "--port", str(ui_port),
                             "--by", "demo")
        self.ui_url = f"http://127.0.0.1:{ui_port}/"
        print(f"  web UI: {self.ui_url}  (Models, Runs, Proposals; follow the demo there)",
              flush=True)
        self.git_clone()

    def git_clone(self) -> None:
        subprocess.run(["git", "clone", "--quiet", str(self.model_bare), str(self.clone)],
                       check=True, capture_output=True, env=self.env())
        for key, value in (("user.name", "Demo Developer"), ("user.email", "dev@example.com")):
            self.git("config", key, value, show=False)

    def pin_week(self, week: int) -> None:
        """Week `week`'s data lands on the shared storage; pin it in the model repo's lock."""
        script = self.example_dir / self.example.generator
        print(f"$ python examples/{self.example.name}/{script.name} --store "
              f"{self.short(str(self.datasets))} --week {week}", flush=True)
        proc = subprocess.run([sys.executable, str(script), "--store", str(self.datasets),
                               "--week", str(week), *self.generator_args],
                              env=self.env(), capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise DemoError(f"{script.name} --week {week} failed:\n{proc.stderr.strip()}")
        lock = self.clone / modelrepo.data_lock(self.clone / "mlops.yaml")
        lock.parent.mkdir(parents=True, exist_ok=True)
        before = self.work / "tmp" / "previous.lock"
        if lock.is_file():
            shutil.copyfile(lock, before)
        self.mlops("data", "snapshot", str(self.datasets / f"week-{week}"),
                   "--name", f"{self.model}-week-{week}", "--out", str(lock))
        if lock.is_file() and before.is_file():
            self.mlops("data", "diff", str(before), str(lock))  # what the PR will show

    # -- 2. a push and its pipeline run --------------------------------------------------------

    def push(self, message: str) -> tuple[str, float]:
        self.git("add", "-A", show=False)
        self.git("commit", "--quiet", "-m", message)
        at = time.time()
        self.git("push", "origin", "HEAD:main")
        return self.git("rev-parse", "HEAD", show=False).strip(), at

    def wait_run(self, sha: str) -> tuple[dict[str, Any], float]:
        """Follow the hook's run of `sha` until it has finished; (its run.json, when)."""
        home = self.runs / sha
        record = home / "out" / "run.json"
        deadline = time.monotonic() + self.args.timeout
        printed = 0
        bar = ProgressLine(self.tty)
        while time.monotonic() < deadline:
            lines = _lines(home / "run.log")
            if len(lines) > printed:  # the runner's own narration, as it happens
                bar.done()
                for line in lines[printed:]:
                    print("  | " + self.short(line), flush=True)
                printed = len(lines)
            alive = _run_alive(home)
            events = run_events.read(home / "out")
            # run_finished comes after run.json (the runner's last write)
            if run_events.finished(events) is not None and record.is_file():
                bar.done()
                return json.loads(record.read_text()), time.time()
            if not alive and (home / "pid").is_file():
                raise DemoError(f"the pipeline run of {sha[:12]} died without an outcome; "
                                f"see {home / 'run.log'}")
            running = run_events.current_task(events)
            if running is not None and running.task in ("smoke-train", "train") and running.log:
                bar.update(running.task, *_training_progress(pathlib.Path(running.log)))
            time.sleep(1)
        raise DemoError(f"the pipeline run of {sha[:12]} did not finish within "
                        f"{self.args.timeout:.0f}s; see {home / 'run.log'}")

    # -- 3. review, approval, canary -----------------------------------------------------------

    def approve(self, version: str) -> float:
        number = self.wait_pr(version)
        self.mlops("pr", "show", str(number), "--gitops", str(self.gitops))
        if self.args.wait_approval:
            print(f"\n>>> Review PR #{number}, then approve it in another terminal:\n"
                  f">>>   cd {self.work} && mlops pr approve {number} --repo gitops.git\n"
                  ">>> (waiting for the merge)", flush=True)
            deadline = time.monotonic() + self.args.timeout
            while time.monotonic() < deadline:
                state = self.state()
                if state is not None and version in (state.stable, state.candidate):
                    return time.time()
                time.sleep(2)
            raise DemoError(f"PR #{number} was not approved within {self.args.timeout:.0f}s")
        print("(the demo plays the reviewer: the report above is what a human reads)")
        self.mlops("pr", "approve", str(number), "--gitops", str(self.gitops))
        return time.time()

    def wait_pr(self, version: str) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for pr in list_open(self.gitops):
                if version in (pr.get("branch") or "") or version in (pr.get("title") or ""):
                    return int(pr["number"])
            time.sleep(1)
        raise DemoError(f"no open pull request proposes {version}; "
                        f"see `mlops pr list --repo {self.gitops}`")

    def state(self) -> CanaryState | None:
        """The model's canary state on the GitOps repo's main (None before the first)."""
        proc = subprocess.run(
            ["git", "--git-dir", str(self.gitops), "show",
             f"main:apps/{self.model}/promotion.yaml"],
            capture_output=True, text=True)
        if proc.returncode != 0:
            return None
        try:
            return load_state(proc.stdout, f"main:apps/{self.model}/promotion.yaml")
        except StateError as exc:  # the controller refuses it too, and says so in its log
            print(f"  [{self.elapsed()}] {exc}", flush=True)
            return None

    def wait_served(self, weights: dict[str, int]) -> float:
        deadline = time.monotonic() + self.args.timeout
        while time.monotonic() < deadline:
            doc = lifecycle.status(Workdir(self.platform))
            live = watch.weights_of(doc, self.model)
            versions = doc.get("models", {}).get(self.model, {}).get("versions", {})
            up = {v for v, info in versions.items() if info.get("haproxy_up")}
            if all(live.get(v) == w and v in up for v, w in weights.items()):
                return time.time()
            self.check_controller()
            time.sleep(0.5)
        raise DemoError(f"the platform did not serve {weights} within {self.args.timeout:.0f}s; "
                        f"see `mlops status --workdir {self.platform}`")

    def check_controller(self) -> None:
        if self.controller.poll() is not None:
            raise DemoError(f"the promotion controller exited ({self.controller.returncode}); "
                            f"see {self.logs / 'controller.log'}")

    def start_load(self) -> None:
        url = str(lifecycle.status(Workdir(self.platform))["models"][self.model]["url"])
        self.url = url
        print(f"model route: {url}  (HAProxy, as the Istio VirtualService would route)")
        self.set_load(self.light_rps)

    @property
    def light_rps(self) -> float:
        return max(1.0, self.args.rps / 8)

    def set_load(self, rps: float) -> None:
        """A steady load at `rps` on the model's route. Light while a pipeline
        trains (training and serving share the cores: full load slowed the
        training by a quarter), full while a canary is judged."""
        if getattr(self, "load_rps", None) == rps:
            return
        old = getattr(self, "load", None)
        if old is not None and old.poll() is None:
            old.terminate()  # `mlops load` stops and writes its report to logs/load.log
            try:
                old.wait(timeout=30)
            except subprocess.TimeoutExpired:
                old.kill()
                old.wait()
        self.load = self.spawn("load", "load", self.url, "--rps", f"{rps:g}", "--duration",
                               "86400", "--images", str(_val_images(self.runs)))
        self.load_rps = rps

    def watch_canary(self, version: str) -> CanaryState:
        """Show the canary until it ends; returns the final promotion state."""
        deadline = time.monotonic() + self.args.timeout
        last_print = 0.0
        last_phase = None
        while time.monotonic() < deadline:
            self.check_controller()
            state = self.state()
            if state is None:
                time.sleep(1)
                continue
            phase = (state.phase, state.weight)
            if phase != last_phase:
                decision = state.last_decision
                if decision is not None and decision.kind in ("step", "rollback", "promote"):
                    print(f"  [{self.elapsed()}] controller: {decision.reason}", flush=True)
                last_phase = phase
            if scenarios.outcome_of(None, state, version) is not None:
                return state
            if state.phase is Phase.PAUSED:
                raise DemoError(f"the canary paused: {state.pause_reason}; "
                                f"see {self.logs / 'controller.log'}")
            if time.monotonic() - last_print >= self.args.show_every:
                last_print = time.monotonic()
                weights = watch.weights_of(lifecycle.status(Workdir(self.platform)), self.model)
                rows = watch.views(
                    watch.observe(self.prometheus, self.model, weights, self.args.preset),
                    weights,
                    state.stable,
                    state.candidate,
                )
                print(f"  [{self.elapsed()}] {watch.render(rows)}", flush=True)
            time.sleep(1)
        raise DemoError(f"the canary of {version} did not end within {self.args.timeout:.0f}s; "
                        f"see {self.logs / 'controller.log'} and `mlops canary status`")

    def wait_report(self, version: str, timeout: float = 30.0) -> pathlib.Path | None:
        """The controller writes a rollout's report just after its final commit."""
        report = self.controller_dir / "rollouts" / self.model / version / "report.md"
        deadline = time.monotonic() + timeout
        while not report.is_file() and time.monotonic() < deadline:
            time.sleep(0.5)
        return report if report.is_file() else None

    # -- the story -----------------------------------------------------------------------------

    def bootstrap(self) -> None:
        self.say("2. First push: the example becomes the stable version")
        modelrepo.copy_example(self.example_dir, self.clone)
        modelrepo.set_full_args(self.clone / "mlops.yaml", self.production_args)
        if self.example.generator:
            self.pin_week(1)
        print(f"(copied {self.short(str(self.example_dir))} into the model repo clone `model/`; "
              "it trains "
              "with --weights-cache, so a push that changes only serving flags reuses the "
              "weights trained for the same data, hyperparameters and code)")
        sha, pushed = self.push(self.example.bootstrap_message())
        run, done = self.wait_run(sha)
        record = self.record("bootstrap", self.example.bootstrap_message(), sha, run,
                             {"push": pushed, "run_done": done}, "promoted")
        if record["outcome"] == "gate_refused" or run.get("status") != "Succeeded":
            raise DemoError(f"the first run did not pass: {self.run_failure(sha, run)}")
        version = record["version"]
        record["marks"]["approved"] = self.approve(version)
        record["marks"]["canary_start"] = self.wait_served({version: 100})
        record["outcome"], record["reason"] = (
            "promoted",
            "first version: stable at 100 % once approved",
        )
        print(f"{version} serves 100 %")
        self.start_load()

    def play(self, scenario: scenarios.Scenario, index: int) -> None:
        self.say(f"{index}. Scenario {scenario.name}: push \"{scenario.message}\"")
        args = scenario.args(self.production_args)
        modelrepo.set_full_args(self.clone / "mlops.yaml", args)
        if scenario.week:
            self.pin_week(scenario.week)
            self.git("diff", "--stat")
        else:
            self.git("diff", "--", "mlops.yaml")
        sha, pushed = self.push(scenario.message)
        run, done = self.wait_run(sha)
        record = self.record(scenario.name, scenario.message, sha, run,
                             {"push": pushed, "run_done": done}, scenario.expect)
        record["expect_classes"] = list(scenario.expect_classes)  # bad-labels: named by the gate
        version = record["version"]
        if record["outcome"] == "gate_refused":
            print(f"the gate refused {version}: {run['gate']['reason']}")
            record["pull_requests"] = [pr["number"] for pr in list_open(self.gitops)
                                       if version and version in (pr.get("title") or "")]
            return
        if record["outcome"] == "pipeline_failed":
            raise DemoError(f"the pipeline failed: {self.run_failure(sha, run)}")
        before = self.state()
        stable = before.stable if before is not None else None
        if stable is None:
            raise DemoError(f"{self.model} has no stable version to canary {version} against; "
                            "the first push must be promoted before a scenario plays")
        if (run.get("gate") or {}).get("outcome") == "review":
            print(f"the gate could not decide on {version}: its PR is marked for review "
                  f"({run['gate']['reason']}); the demo reviews it and approves")
        self.set_load(self.args.rps)  # the canary is judged under the full load
        record["marks"]["approved"] = self.approve(version)
        record["marks"]["canary_start"] = self.wait_served({stable: 90, version: 10})
        print(f"canary started: {version} 10 %, {stable} 90 %; the controller decides from here")
        final = self.watch_canary(version)
        record["marks"]["finished"] = time.time()
        record["outcome"] = scenarios.outcome_of(None, final, version)
        record["reason"] = final.last_decision.reason if final.last_decision else ""
        print(f"{version}: {record['outcome']} ({record['reason']})")
        self.set_load(self.light_rps)  # until the next canary
        report = self.wait_report(version)
        if report is not None:
            record["canary_report"] = str(report)
            print(f"canary report {self.short(str(report))} (with its plot, canary.png)")
        if record["outcome"] == "promoted":
            self.production_args = args

    def record(self, name: str, message: str, sha: str, run: dict[str, Any],
               marks: dict[str, float], expect: str) -> dict[str, Any]:
        out = self.runs / sha / "out"
        try:
            meta = read_record_data(out / "full" / "model", required=False)
        except ArtifactError:
            meta = {}  # a run that died mid-export: the summary says "-"
        metrics_file = out / "full" / "metrics.json"
        metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
        record = {
            "scenario": name, "message": message, "commit": sha,
            "version": meta.get("version"), "map50": metrics.get("map50"),
            "expect": expect, "outcome": scenarios.outcome_of(run, None, ""),
            "reason": (run.get("gate") or {}).get("reason") or "",
            "worse_classes": (run.get("gate") or {}).get("worse_classes") or [],
            "marks": marks, "run_report": str(out / "report.md"),
        }
        self.results.append(record)
        return record

    def run_failure(self, sha: str, run: dict[str, Any]) -> str:
        gate = run.get("gate") or {}
        return gate.get("reason") or f"{run.get('failures')}; see {self.runs / sha / 'run.log'}"

    def summarise(self) -> list[str]:
        self.say("Summary")
        problems = []
        run_docs = {}
        for record in self.results:
            run_json = self.runs / record["commit"] / "out" / "run.json"
            run_docs[record["commit"]] = (
                json.loads(run_json.read_text()) if run_json.is_file() else {}
            )
            record["timeline"] = timeline.breakdown(record["marks"], run_docs[record["commit"]])
            unnamed = sorted(set(record.get("expect_classes", [])) - set(record["worse_classes"]))
            ok = record["outcome"] == record["expect"] and not unnamed
            if not ok:
                problems.append(
                    f"{record['scenario']}: {record['outcome']}, expected {record['expect']}"
                    + (f" naming {', '.join(unnamed)} as worse" if unnamed else "")
                )
            mark = "ok " if ok else "!! "
            map50 = f"mAP@0.5 {record['map50']:.3f}" if record.get("map50") is not None else ""
            print(f"{mark}{record['scenario']:<9} {str(record['version']):<16} {map50:<14} "
                  f"{str(record['outcome']):<13} {record.get('reason') or ''}")
        print("\nGitOps history of the model (one commit per change to production; "
              "a merged pull request is an approval):")
        # --full-history keeps the merges: a path-limited log would drop them.
        log = subprocess.run(["git", "--git-dir", str(self.gitops), "log", "--full-history",
                              "--format=%h %an  %s", "main", "--", f"apps/{self.model}"],
                             capture_output=True, text=True)
        print("\n".join("  " + line for line in log.stdout.splitlines()))
        print("\nWhere to look:")
        for record in self.results:
            print(f"  {record['scenario']:<9} pipeline report {self.short(record['run_report'])}")
        rollouts = self.controller_dir / "rollouts"
        for report in sorted(rollouts.glob(f"{self.model}/*/report.md")):
            pngs = sorted(report.parent.glob("*.png"))
            print(f"  canary report {self.short(str(report))}"
                  + (f"  plot {self.short(str(pngs[0]))}" if pngs else ""))
        doc = {"workdir": str(self.work), "seconds": round(time.monotonic() - self.started, 1),
               "scenarios": self.results, "gitops_log": log.stdout.splitlines()}
        (self.work / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
        print("  summary   summary.json")
        if self.args.keep_running:
            print(f"\nThe platform keeps running: `mlops status --workdir {self.platform} "
                  f"--runs {self.runs}`; "
                  f"Prometheus {self.prometheus}; model route {getattr(self, 'url', '-')}; "
                  f"web UI {getattr(self, 'ui_url', '-')}.\n"
                  f"Stop everything with: mlops down --workdir {self.platform}"
                  + (f"; the web UI with: kill {self.ui.pid}" if getattr(self, "ui", None)
                     else ""))
        print(
            f"\nClean up: mlops down --workdir {self.platform} (if still up), "
            f"then rm -rf {self.work}"
        )
        print(f"demo finished in {self.elapsed()}")
        return problems

    def stop(self) -> None:
        if self.args.keep_running:
            return
        self.say("Stopping everything the demo started")
        ui = getattr(self, "ui", None)
        if ui is not None and ui.poll() is None:
            ui.terminate()  # serves until told: the rest end with the platform
            try:  # gone before `mlops down` looks, which would list it as exiting
                ui.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass  # `mlops down` stops it
        self.mlops("down", "--workdir", str(self.platform), check=False, marked=False)
        for proc in self.background:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


class ProgressLine:
    """A training progress bar: redrawn in place on a terminal, every 10 % otherwise."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.shown = -1
        self.open = False

    def update(self, task: str, step: int, total: int) -> None:
        if total <= 0:
            return
        fraction = min(1.0, step / total)
        tenth = int(fraction * 10)
        bar = "#" * int(fraction * 30)
        line = f"    {task:<11} [{bar:<30}] {step}/{total} steps"
        if self.tty:
            print("\r" + line, end="", flush=True)
            self.open = True
        elif tenth > self.shown:
            print(line, flush=True)
        self.shown = max(self.shown, tenth)

    def done(self) -> None:
        if self.open:
            print(flush=True)
            self.open = False
        self.shown = -1


def _run_alive(home: pathlib.Path) -> bool:
    """Is the hook's queued run (its pid file) still running? True until it is known."""
    try:
        pid = int((home / "pid").read_text().strip())
    except (OSError, ValueError):
        return True
    return procs.is_running(pid)


def _lines(path: pathlib.Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def training_log(log: pathlib.Path) -> dict[str, Any]:
    """Progress from train.py's log lines (`total_steps=N`, `step=N epoch=E loss=L`):
    {"step", "total", "epoch", "loss"} (the latest of each; 0/None before the first)."""
    found: dict[str, Any] = {"step": 0, "total": 0, "epoch": None, "loss": None}
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return found
    for token in text.split():
        key, _, value = token.partition("=")
        if key == "total_steps" and value.isdigit():
            found["total"] = int(value)
        elif key == "step" and value.isdigit():
            found["step"] = max(found["step"], int(value))
        elif key == "epoch" and value.isdigit():
            found["epoch"] = int(value)
        elif key == "loss":
            try:
                found["loss"] = float(value)
            except ValueError:
                pass
    return found


def _training_progress(log: pathlib.Path) -> tuple[int, int]:
    """(step, total) from train.py's log lines (`total_steps=N`, `step=N`)."""
    found = training_log(log)
    return found["step"], found["total"]


def _val_images(runs: pathlib.Path) -> pathlib.Path:
    # the val split prepare-data laid out from the pin, or (an example without pins) the
    # one train.py generated in the checkout
    for pattern in ("*/out/data/images/val", "*/repo/data/val"):
        for candidate in sorted(runs.glob(pattern)):
            return candidate
    raise DemoError(f"no validation images under {runs}")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def play(args: argparse.Namespace) -> int:
    """`mlops demo`: set up, bootstrap, play the scenarios, summarise, clean up."""
    plan = scenarios.plan(args.scenario, getattr(args, "example", scenarios.DEFAULT_EXAMPLE))
    demo = Demo(args)
    # `kill` gets the same clean stop as Ctrl-C: nothing the demo started outlives it.
    signal.signal(signal.SIGTERM, _interrupt)
    problems: list[str] = []
    try:
        demo.set_up()
        demo.bootstrap()
        for index, scenario in enumerate(plan, start=3):
            demo.play(scenario, index)
        problems = demo.summarise()
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        problems = ["interrupted"]
    finally:
        demo.stop()
    if problems:
        raise DemoError("the demo did not go as expected: " + "; ".join(problems))
    return 0

