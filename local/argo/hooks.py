"""The local push trigger: a `post-receive` hook in a bare model repo.

What Argo Events' Sensor does in a cluster: `git push` to the bare repo starts `mlops run`
on a fresh checkout of the pushed commit, in the background, which renders that commit's
pipeline (`workflows.push`) and runs it. The Sensor's rules hold (`workflows.argo_events`):
the configured branch only and never a deletion, never a commit by the bot identity, one
run per commit (an atomic `mkdir` of `<runs>/<sha>/`). Runs of one repo queue behind
`<runs>/.queue.lock`. Settings live in the bare repo's git config (`mlops.branch`,
`mlops.botIdentity`, `mlops.runsDir`). Why: docs/pipeline-internals.md.
"""

import fcntl
import json
import os
import pathlib
import stat
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from contracts.names import model_name_problem
from gitops.git import BOT_IDENTITY, redact, remote
from gitops.protect import protect_branch
from workflows.errors import ConfigError

ZERO = "0" * 40
QUEUE_LOCK = ".queue.lock"
HOOK_MARK = "installed by mlops"


@dataclass(frozen=True)
class PushDecision:
    """What to do about one pushed ref."""

    ref: str
    sha: str
    run: bool
    reason: str


def decide(
    old: str, new: str, ref: str, *, branch: str, author: tuple[str, str], bot: str
) -> PushDecision:
    """Pure: should this ref update start a run? (duplicates are checked later, on disk)."""
    if set(new) == {"0"}:
        return PushDecision(ref, new, False, f"{ref} deleted: nothing to train")
    if ref != f"refs/heads/{branch}":
        return PushDecision(ref, new, False, f"{ref} is not refs/heads/{branch}: not trained")
    name, email = author
    if bot and (name == bot or email == bot or email.split("@")[0] == bot):
        return PushDecision(
            ref, new, False, f"{new[:12]} is authored by the bot {bot!r}: never trained"
        )
    return PushDecision(ref, new, True, f"{ref} -> {new[:12]}")


def _clean_env() -> dict[str, str]:
    # Hooks run with GIT_DIR and friends set to the bare repo; a child git in
    # another directory must not inherit them.
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def _git(*args: str, cwd: pathlib.Path | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=_clean_env())
    if proc.returncode != 0:
        raise ConfigError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def _config(bare: pathlib.Path, key: str, default: str) -> str:
    proc = subprocess.run(
        ["git", "--git-dir", str(bare), "config", "--get", key],
        capture_output=True,
        text=True,
        env=_clean_env(),
    )
    return proc.stdout.strip() if proc.returncode == 0 else default


def runs_dir(bare: pathlib.Path) -> pathlib.Path:
    """Where the runs of a bare repo go (`mlops.runsDir`, default `<bare>/mlops-runs`)."""
    return pathlib.Path(_config(bare, "mlops.runsDir", str(bare / "mlops-runs")))


def install_hook(
    bare: pathlib.Path,
    *,
    branch: str = "main",
    bot: str = BOT_IDENTITY.email,
    runs: pathlib.Path | None = None,
    gitops: str | None = None,
    model: str | None = None,
) -> pathlib.Path:
    """Install (or refresh) the post-receive hook of an existing bare repo.

    `model`: the model this repo publishes (`mlops.model`); a push whose mlops.yaml
    names another is refused. Unset, a push names its own (one person's laptop)."""
    bare = pathlib.Path(bare).resolve()
    if not bare.is_dir():
        raise ConfigError(f"{bare}: no such directory")
    try:
        is_bare = _git("--git-dir", str(bare), "rev-parse", "--is-bare-repository")
    except ConfigError:
        is_bare = "false"
    if is_bare != "true":
        raise ConfigError(
            f"{bare}: not a bare git repository (create one with `mlops hooks init-bare`)"
        )
    hook = bare / "hooks" / "post-receive"
    if hook.exists() and HOOK_MARK not in hook.read_text(errors="replace"):
        raise ConfigError(
            f"{hook}: a post-receive hook that mlops did not write exists; not replacing it"
        )
    _git("--git-dir", str(bare), "config", "mlops.branch", branch)
    _git("--git-dir", str(bare), "config", "mlops.botIdentity", bot)
    if runs is not None:
        _git("--git-dir", str(bare), "config", "mlops.runsDir", str(pathlib.Path(runs).resolve()))
    if gitops is not None:  # where runs propose candidates (empty: end at the gate)
        if gitops and gitops != remote(gitops).url and "://" in gitops:
            # The bare repo's config is a file anyone who reads the repo reads.
            raise ConfigError(f"--gitops {redact(gitops)}: a URL with credentials would be "
                             "stored in the repo's config; pass the URL without them and "
                             "set MLOPS_GIT_TOKEN for the runs")
        _git("--git-dir", str(bare), "config", "mlops.gitopsRepo", gitops)
    if model is not None:
        problem = model_name_problem(model)
        if problem:
            raise ConfigError(f"--model {model!r}: {problem}")
        _git("--git-dir", str(bare), "config", "mlops.model", model)
    hook.parent.mkdir(exist_ok=True)
    # The interpreter is pinned so the hook works whatever PATH git runs it with.
    hook.write_text(
        "#!/bin/sh\n"
        f"# {HOOK_MARK}: `git push` starts a local pipeline run of the pushed commit.\n"
        f'exec "{sys.executable}" -m local.argo.hooks post-receive\n'
    )
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return hook


def init_bare(
    path: pathlib.Path,
    *,
    branch: str = "main",
    bot: str = BOT_IDENTITY.email,
    runs: pathlib.Path | None = None,
    gitops: str | None = None,
    model: str | None = None,
) -> pathlib.Path:
    """Create a bare model repo with the hook installed."""
    path = pathlib.Path(path).resolve()
    if path.exists() and any(path.iterdir()):
        raise ConfigError(
            f"{path}: exists and is not empty; use `mlops hooks install` for an existing repo"
        )
    _git("init", "--quiet", "--bare", "--initial-branch", branch, str(path))
    protect_branch(path, branch)  # what was pushed (and trained) stays in the history
    return install_hook(path, branch=branch, bot=bot, runs=runs, gitops=gitops, model=model)


def start_run(
    bare: pathlib.Path, decision: PushDecision, runs: pathlib.Path
) -> tuple[bool, pathlib.Path]:
    """Claim `<runs>/<sha>` and start `mlops run` there; (started, run dir)."""
    home = runs / decision.sha
    runs.mkdir(parents=True, exist_ok=True)
    try:
        home.mkdir()  # atomic: exactly one push wins the claim
    except FileExistsError:
        return False, home
    (home / "push.json").write_text(
        json.dumps({"ref": decision.ref, "sha": decision.sha, "at": time.time()}) + "\n"
    )
    work = home / "repo"
    _git("clone", "--quiet", "--no-checkout", str(bare), str(work))
    _git("-C", str(work), "checkout", "--quiet", "--detach", decision.sha)
    run_args = mlops_run_args(work, home / "out", _config(bare, "mlops.gitopsRepo", ""),
                              _config(bare, "mlops.model", ""))
    with open(home / "run.log", "ab") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "local.argo.hooks", "run-queued", str(runs / QUEUE_LOCK),
                "--",
                sys.executable, "-m", "mlops", *run_args,
            ],  # fmt: skip
            cwd=home,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_clean_env(),
            start_new_session=True,  # outlives the hook; the push does not wait
        )
    (home / "pid").write_text(f"{proc.pid}\n")
    return True, home


def mlops_run_args(work: pathlib.Path, out: pathlib.Path, gitops: str,
                   model: str = "") -> list[str]:
    """`mlops` arguments of one pushed commit's run (tests parse them with the real CLI).

    The GitOps repo is always passed, empty when none is configured, and the model when
    one is: they are the platform's (`workflows.binding`), and a pushed mlops.yaml that
    names others is refused by the run's submit step."""
    bound = ["--model", model] if model else []
    return ["run", str(work), "--out", str(out), *bound, "--param", f"gitops-repo={gitops}"]


def post_receive(bare: pathlib.Path, lines: Iterable[str]) -> list[str]:
    """Handle the hook's stdin (`<old> <new> <ref>` per line); returns messages."""
    branch = _config(bare, "mlops.branch", "main")
    bot = _config(bare, "mlops.botIdentity", BOT_IDENTITY.email)
    runs = runs_dir(bare)
    messages = []
    for line in lines:
        parts = line.split()
        if len(parts) != 3:
            continue
        old, new, ref = parts
        author = ("", "")
        if set(new) != {"0"}:
            shown = _git("--git-dir", str(bare), "log", "-1", "--format=%an%n%ae", new).splitlines()
            author = (shown[0] if shown else "", shown[1] if len(shown) > 1 else "")
        decision = decide(old, new, ref, branch=branch, author=author, bot=bot)
        if not decision.run:
            messages.append(f"mlops: skipped: {decision.reason}")
            continue
        started, home = start_run(bare, decision, runs)
        if started:
            messages.append(f"mlops: started a local run of {new[:12]}; log: {home / 'run.log'}")
        else:
            messages.append(f"mlops: {new[:12]} already has a run ({home}); not starting another")
    return messages


def run_queued(lock: pathlib.Path, argv: list[str]) -> int:
    """Run `argv` once no other run of this repo holds the queue lock.

    Two pushes in quick succession queue instead of training at the same
    time on the same cores; the lock is released when the run ends, even if
    it is killed (the kernel drops a dead process's flock).
    """

    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        print(f"mlops: {time.strftime('%H:%M:%S')} starting: {redact(' '.join(argv))}",
              flush=True)
        return subprocess.call(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry of the installed hook (`python -m local.argo.hooks post-receive`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run-queued"] and len(args) > 3 and args[2] == "--":
        return run_queued(pathlib.Path(args[1]), args[3:])
    if args[:1] != ["post-receive"]:
        print(
            "usage: python -m local.argo.hooks post-receive  (reads git's hook stdin)",
            file=sys.stderr,
        )
        return 2
    bare = pathlib.Path(os.environ.get("GIT_DIR", ".")).resolve()
    try:
        for message in post_receive(bare, sys.stdin):
            print(message, flush=True)
    except ConfigError as exc:
        # A broken trigger must never reject or hang the push; say it loudly.
        print(f"mlops: error: {exc}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
