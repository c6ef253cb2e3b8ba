"""Worker processes behind one port (`workers` > 1, `mlops serve --workers N`).

A Paddle predictor's `run()` holds the GIL, so threads of one process do not
add throughput; N processes do. The supervisor (this process) binds the port
once and starts N workers that accept on the same listening socket (the
kernel hands each connection to one of them; uvicorn's own multi-worker mode
does the same), each with its own model load, predictors and event loop.
Rules: metrics are the sum over workers (`metrics.py`); a worker answers
ready only when *every* worker is ready (they share one flag per worker,
`ServerState.peers`), so a probe never sees a half-loaded server;
SIGTERM/SIGINT to the supervisor is passed to every worker, which drains; a
worker that exits on its own (a failed load, the weights check) stops the
others and the supervisor exits with its code, so the pod restarts as a
whole; a worker whose supervisor dies (even by SIGKILL) gets SIGTERM from the
kernel (`PR_SET_PDEATHSIG`), so no worker outlives it.
"""

import contextlib
import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from typing import Any, Callable, Sequence

from prometheus_client import multiprocess

from serving.dataplane import ServerSettings
from serving.errors import ModelDirError, ServingError
from serving.metrics import MULTIPROC_ENV
from serving.modeldir import ModelDir, load_model_dir

log = logging.getLogger("serving.server")

#: One server process: `serving.server._serve_one`, passed in (it is the server's to own;
#: a module-level function, so the spawned worker receives it by name).
ServeOne = Callable[..., int]


_PR_SET_PDEATHSIG = 1


def _die_with(parent_pid: int) -> None:
    """Have the kernel send SIGTERM to this process when its parent dies (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    if os.getppid() != parent_pid:  # the parent died before the prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _worker_main(serve_one: ServeOne, sock: socket.socket, model_path: str,
                 settings: ServerSettings, log_level: str, peers: Sequence[int], index: int,
                 parent_pid: int) -> None:
    """Entry point of one worker process (spawned: a fresh interpreter)."""
    _die_with(parent_pid)
    logging.basicConfig(level=log_level.upper(),
                        format=f"%(asctime)s %(name)s[w{index}] %(levelname)s %(message)s")
    try:
        model = load_model_dir(model_path)
    except ModelDirError as exc:
        log.error("exiting: %s", exc)
        raise SystemExit(1) from None
    raise SystemExit(serve_one(model, settings, log_level, sock, peers, index))


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket every worker accepts on (bound once, here)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP,
    # and without it every small answer waited ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServingError(f"cannot listen on {host}:{port}: {exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def fresh_metrics_dir() -> tuple[str, bool]:
    """An empty directory for the workers' metric files: PROMETHEUS_MULTIPROC_DIR when
    set (emptied: values of an earlier run must not be summed in), else a new one."""
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        os.makedirs(given, exist_ok=True)
        for name in os.listdir(given):
            if name.endswith(".db"):
                os.unlink(os.path.join(given, name))
        return given, False
    return tempfile.mkdtemp(prefix="mlops-serve-metrics-"), True


def supervise(model: ModelDir, settings: ServerSettings, log_level: str,
              serve_one: ServeOne) -> int:
    """Start `settings.workers` worker processes on one socket; see the module docstring."""
    sock = _bind(settings.host, settings.port)
    metrics_dir, created = fresh_metrics_dir()
    os.environ[MULTIPROC_ENV] = metrics_dir  # inherited by the workers before they import
    context = multiprocessing.get_context("spawn")  # no fork of a process with threads
    peers = context.Array("b", settings.workers, lock=False)
    workers = [
        context.Process(
            target=_worker_main, name=f"mlops-serve-worker-{i}",
            args=(serve_one, sock, str(model.path), settings, log_level, peers, i,
                  os.getpid()),
        )
        for i in range(settings.workers)
    ]
    stopping = threading.Event()

    def stop_all(sig: int = signal.SIGTERM) -> None:
        for worker in workers:
            if worker.pid is not None and worker.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, sig)

    def on_signal(sig: int, frame: Any) -> None:
        stopping.set()
        stop_all()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    failed: int | None = None
    try:
        for worker in workers:
            worker.start()
        log.info("serving %s version %s on %s:%d with %d worker processes (pids %s)",
                 settings.model_name, settings.model_version, settings.host, settings.port,
                 settings.workers, ", ".join(str(w.pid) for w in workers))
        deadline: float | None = None
        while any(w.exitcode is None for w in workers):
            multiprocessing.connection.wait([w.sentinel for w in workers], timeout=0.5)
            for worker in workers:
                if worker.exitcode is not None and not stopping.is_set():
                    failed = worker.exitcode or 1
                    log.error("worker %s (pid %s) exited with %s; stopping the others",
                              worker.name, worker.pid, worker.exitcode)
                    stopping.set()
                    stop_all()
            if stopping.is_set() and deadline is None:
                deadline = time.monotonic() + settings.graceful_timeout + 10
            if deadline is not None and time.monotonic() > deadline:
                log.error("workers still running %.0f s after SIGTERM; killing them",
                          settings.graceful_timeout + 10)
                stop_all(signal.SIGKILL)
                deadline = time.monotonic() + 3600
    finally:
        stop_all(signal.SIGKILL)  # only reached with live workers on an error here
        for worker in workers:
            worker.join(timeout=10)
            if worker.pid is not None:
                multiprocess.mark_process_dead(worker.pid, metrics_dir)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
        if created:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    if failed is not None:
        return failed
    # uvicorn re-raises the signal it drained on, so a worker stopped by us ends "by SIGTERM"
    drained = (0, -signal.SIGTERM, -signal.SIGINT)
    return max((0 if w.exitcode in drained else 1 for w in workers), default=0)
