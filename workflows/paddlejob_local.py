"""Run a rendered PaddleJob on this machine the way paddle-operator runs it in a cluster.

Each worker pod of a collective job becomes a process group started with its
container's command, env and working directory (`cogs.containers`) plus the environment
paddle-operator v0.3.5 gives it (`controllers/paddlejob_helper.go`), pod IPs as
distinct loopback addresses; `readOnly` mounts are bind-mounted read-only in the
workers' own mount namespace (`read_only_argv`). Why the worker command must be
Paddle's launcher, and the rest: docs/inside-workflows.md.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import IO, Any, Mapping, Sequence

from cogs.containers import ContainerSpecError, Mounts, container_env, local_argv, local_process

__all__ = [
    "HOST_PORT_NUM",
    "PADDLE_PORT",
    "PaddleJobFailed",
    "WorkerSpec",
    "operator_env",
    "read_only_argv",
    "read_only_dirs",
    "read_only_problem",
    "run_paddlejob",
    "worker_ips",
    "worker_specs",
]

#: paddle-operator v0.3.5 `controllers/paddlejob_controller.go`.
PADDLE_PORT = 36000
HOST_PORT_NUM = 20
#: `api/v1/paddlejob_types.go`: `TrainingRole[ResourceWorker]`.
WORKER_ROLE = "TRAINER"

class PaddleJobFailed(RuntimeError):
    """A worker exited non-zero (or the job ran past its deadline); the message names it."""


def worker_ips(replicas: int) -> list[str]:
    """Stand-ins for the workers' pod IPs: one loopback address each."""
    if not 1 <= replicas <= 250:
        raise ValueError(f"worker.replicas must be between 1 and 250, got {replicas}")
    return [f"127.0.0.{i + 1}" for i in range(replicas)]


def operator_env(index: int, ips: Sequence[str], port: int = PADDLE_PORT) -> dict[str, str]:
    """The variables paddle-operator gives worker `index` of a PodIP collective job."""
    return {
        "POD_IP": ips[index],
        "PADDLE_TRAINER_ID": str(index),
        "TRAINING_ROLE": WORKER_ROLE,
        "PADDLE_TRAINING_ROLE": WORKER_ROLE,
        "TRAINER_PORTS_NUM": str(HOST_PORT_NUM),
        "PADDLE_PORT": str(port),
        "PADDLE_TRAINER_ENDPOINTS": ",".join(f"{ip}:{port}" for ip in ips),
        "PADDLE_TRAINERS": ",".join(ips),
        "PADDLE_TRAINERS_NUM": str(len(ips)),
    }


@dataclass(frozen=True)
class WorkerSpec:
    """One worker process: what its pod's container would run, and with what."""

    index: int
    argv: list[str]
    env: dict[str, str]
    cwd: str


def worker_specs(
    manifest: Mapping[str, Any],
    *,
    port: int,
    mounts: Mounts | None = None,
    local_env: Mapping[str, str] | None = None,
    base_env: Mapping[str, str] | None = None,
    cores: int | None = None,
    read_only: Sequence[str] = (),
) -> list[WorkerSpec]:
    """The processes for `manifest` (pure: nothing starts).

    `mounts` maps the volumes' container paths to local directories,
    `local_env` overrides the container's env (the local runner's paths),
    `base_env` is the machine's environment (PATH...), `read_only` the local folders
    each worker sees read-only (`read_only_dirs`; wrapped by `read_only_argv`).
    """
    spec = manifest.get("spec") or {}
    worker = spec.get("worker") or {}
    if spec.get("ps") or spec.get("heter"):
        raise PaddleJobFailed("only collective PaddleJobs (workers, no ps/heter) run locally")
    replicas = int(worker.get("replicas", 1))
    containers = (((worker.get("template") or {}).get("spec") or {}).get("containers")) or []
    if not containers:
        raise PaddleJobFailed("spec.worker.template.spec.containers is empty")
    container = containers[0]  # the operator injects its env into container 0 only
    source = f"PaddleJob {(manifest.get('metadata') or {}).get('name', '')} worker container"
    try:
        env_c = {**container_env(container, source=source, mounts=mounts), **(local_env or {})}
    except ContainerSpecError as exc:
        raise PaddleJobFailed(str(exc)) from None
    ips = worker_ips(replicas)
    base = {k: v for k, v in (base_env if base_env is not None else os.environ).items()
            if not k.startswith(("PADDLE_", "FLAGS_")) and k not in ("POD_IP", "TRAINING_ROLE")}
    threads = str(max(1, (cores or os.cpu_count() or 1) // replicas))
    specs = []
    for i in range(replicas):
        env = {**base, "OMP_NUM_THREADS": threads, **env_c, **operator_env(i, ips, port)}
        env.setdefault("PYTHONUNBUFFERED", "1")
        try:
            process = local_process(container, source=source, mounts=mounts, env=env)
        except ContainerSpecError as exc:
            raise PaddleJobFailed(str(exc)) from None
        argv = local_argv(process.argv, sys.executable)
        if read_only:
            argv = read_only_argv(argv)
            env["MLOPS_READ_ONLY"] = "\n".join(read_only)
        specs.append(WorkerSpec(index=i, argv=argv, env=env, cwd=process.cwd or os.getcwd()))
    return specs


def read_only_dirs(manifest: Mapping[str, Any], mounts: Mounts) -> list[str]:
    """The local folders of the worker container's `readOnly` volume mounts (pure)."""
    spec = manifest.get("spec") or {}
    template = ((spec.get("worker") or {}).get("template") or {}).get("spec") or {}
    containers = template.get("containers") or [{}]
    found = []
    for mount in containers[0].get("volumeMounts") or []:
        local = mounts.local(str(mount.get("mountPath", ""))) if mount.get("readOnly") else None
        if local and os.path.isdir(local) and local not in found:
            found.append(local)
    return found


#: Run as `sh -c READ_ONLY_SCRIPT sh ARGV...` in a new mount namespace: each folder named
#: in $MLOPS_READ_ONLY (one a line) is bind-mounted onto itself and remounted read-only,
#: for this process tree only (mount(8): "mount --bind olddir newdir", then "-o
#: remount,bind,ro"), then the worker's own command runs in its place, from its working
#: folder looked up again (the one it started in is the mount underneath).
READ_ONLY_SCRIPT = (
    'set -ef; IFS="\n"; for d in $MLOPS_READ_ONLY; do mount --bind "$d" "$d"; '
    'mount -o remount,bind,ro "$d" "$d"; done; unset MLOPS_READ_ONLY; cd "$PWD"; exec "$@"'
)


def _namespace_argv() -> list[str]:
    # As root a mount namespace is enough; otherwise a user namespace maps us to its root,
    # which may then mount in it (user_namespaces(7)).
    private = ["unshare", "--mount", "--propagation", "private"]
    return private if os.geteuid() == 0 else [*private, "--map-root-user"]


def read_only_argv(argv: Sequence[str]) -> list[str]:
    """`argv` run with the folders of `$MLOPS_READ_ONLY` read-only (pure)."""
    return [*_namespace_argv(), "sh", "-c", READ_ONLY_SCRIPT, "sh", *argv]


def read_only_problem() -> str | None:
    """Why this machine cannot mount a folder read-only for one process (None: it can)."""
    with tempfile.TemporaryDirectory(prefix="mlops-ro-") as tmp:
        try:
            proc = subprocess.run(
                read_only_argv(["sh", "-c", 'touch "$0/x" 2>/dev/null && exit 3; exit 0', tmp]),
                env={**os.environ, "MLOPS_READ_ONLY": tmp}, capture_output=True, text=True,
                timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"cannot run unshare(1): {exc}"
    if proc.returncode == 3:
        return "a read-only bind mount was still writable"
    if proc.returncode != 0:
        return f"unshare(1) and mount(8) failed: {proc.stderr.strip()[:200]}"
    return None


def _pump(stream: IO[bytes], prefix: bytes, log: IO[bytes], lock: threading.Lock,
          echo: IO[bytes] | None) -> None:
    for line in stream:
        with lock:
            log.write(prefix + line)
            log.flush()
            if echo is not None:
                echo.write(prefix + line)
                echo.flush()


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the worker's process group (the launcher and its rank), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_paddlejob(
    specs: Sequence[WorkerSpec],
    log: IO[bytes],
    *,
    name: str = "paddlejob",
    timeout: float | None = None,
    echo: IO[bytes] | None = None,
) -> float:
    """Start every worker, stream their output into `log`, wait; returns seconds taken.

    One failing worker fails the job and the others are stopped (a collective
    cannot go on without a rank; the operator marks the job Failed when a
    worker fails). Each worker runs in its own session, so stopping it stops
    the launcher's children too; nothing is left running on any way out
    (failure, deadline, Ctrl-C).
    """
    lock = threading.Lock()
    procs: list[subprocess.Popen[bytes]] = []
    pumps: list[threading.Thread] = []
    start = time.monotonic()
    try:
        for spec in specs:
            with lock:
                log.write(f"[worker-{spec.index}] $ {' '.join(spec.argv)}\n".encode())
                log.flush()
            proc = subprocess.Popen(
                spec.argv, cwd=spec.cwd, env=spec.env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            )
            procs.append(proc)
            assert proc.stdout is not None
            pump = threading.Thread(target=_pump, daemon=True, args=(
                proc.stdout, f"[worker-{spec.index}] ".encode(), log, lock, echo))
            pump.start()
            pumps.append(pump)
        deadline = None if timeout is None else start + timeout
        while True:
            codes = [p.poll() for p in procs]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                index, code = failed[0]
                raise PaddleJobFailed(
                    f"PaddleJob {name}: worker {index} exited with code {code}"
                    + (" (the other workers were stopped)" if len(procs) > 1 else ""))
            if all(c == 0 for c in codes):
                break
            if deadline is not None and time.monotonic() > deadline:
                raise PaddleJobFailed(f"PaddleJob {name}: still running after {timeout:.0f} s "
                                      "(activeDeadlineSeconds); stopped")
            time.sleep(0.2)
    finally:
        for proc in procs:
            if proc.poll() is None:
                _stop_group(proc)
        for pump in pumps:
            pump.join(timeout=5.0)
    return time.monotonic() - start
