"""Paddle Inference predictors, used safely from concurrent requests.

A Paddle predictor is not thread-safe: two threads must never run the same
one. The pool owns a fixed set of worker threads, and each thread owns one
predictor (a `clone()` of the first, sharing its weights), so a request
handed to a worker runs on that worker's predictor and nothing is shared
while running. The number of workers is the concurrency of inference; the
server bounds how many requests may wait for them (see `server.py`).

`warm_up` runs one inference on every worker's predictor, so the first
real request does not pay for lazy initialisation and readiness means
"every predictor has run once".
"""

import concurrent.futures
import math
import os
import threading
import time
from typing import Any, Callable, TypeVar

import numpy as np

from serving.errors import ClientClosed, InferenceFailed, ModelDirError
from serving.modeldir import ModelDir

T = TypeVar("T")


def default_threads() -> int:
    """One worker per core this process may use: CPU affinity, capped by a cgroup quota.

    In a pod with `resources.limits.cpu: 2` on a 64-core node, affinity says 64
    while the CFS quota allows 2; threads beyond the quota only add contention.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def _cgroup_cpu_quota(path: str = "/sys/fs/cgroup/cpu.max") -> float | None:
    """CPUs allowed by a cgroup v2 quota ("max" or absent: no limit)."""
    try:
        quota, period = open(path).read().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None


def create_predictor(model: ModelDir, math_threads: int = 1) -> Any:
    """A CPU Paddle Inference predictor for the model directory."""
    import paddle.inference as paddle_infer  # heavy import, only where needed

    config = paddle_infer.Config(str(model.program_file), str(model.params_file))
    config.disable_gpu()
    config.set_cpu_math_library_num_threads(math_threads)
    config.disable_glog_info()
    try:
        return paddle_infer.create_predictor(config)
    except Exception as exc:  # paddle raises RuntimeError/ValueError with C++ text
        raise ModelDirError(f"{model.path}: paddle.inference cannot load the model: {exc}") from exc


def run_predictor(predictor: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run one predictor on named inputs; outputs in the predictor's order."""
    for name, array in feeds.items():
        handle = predictor.get_input_handle(name)
        handle.reshape(list(array.shape))
        handle.copy_from_cpu(np.ascontiguousarray(array))
    predictor.run()
    return [predictor.get_output_handle(n).copy_to_cpu() for n in predictor.get_output_names()]


class PredictorPool:
    """Worker threads, each with its own predictor; `submit` runs work on one."""

    def __init__(self, model: ModelDir, threads: int, math_threads: int = 1) -> None:
        self.model = model
        self.threads = threads
        self._root = create_predictor(model, math_threads)
        self.input_names: list[str] = list(self._root.get_input_names())
        self.output_names: list[str] = list(self._root.get_output_names())
        self.input_dtypes = {
            n: str(self._root.get_input_handle(n).type()).rsplit(".", 1)[-1]
            for n in self.input_names
        }
        self._clone_lock = threading.Lock()
        self._local = threading.local()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="predictor"
        )

    def _predictor(self) -> Any:
        predictor = getattr(self._local, "predictor", None)
        if predictor is None:
            with self._clone_lock:
                predictor = self._root.clone()
            self._local.predictor = predictor
        return predictor

    def infer(self, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], float]:
        """Run this worker thread's predictor; returns (outputs, seconds in `run`).

        Must be called from inside work given to `submit` (a pool thread).
        Paddle errors become `InferenceFailed` (HTTP 500).
        """
        self.raise_if_abandoned()
        predictor = self._predictor()
        start = time.perf_counter()
        try:
            outputs = run_predictor(predictor, feeds)
        except Exception as exc:  # paddle raises ValueError/RuntimeError with C++ text
            raise InferenceFailed(f"inference failed: {_paddle_reason(exc)}") from exc
        return outputs, time.perf_counter() - start

    def submit(self, fn: Callable[..., T], *args: Any,
               abandoned: threading.Event | None = None) -> "concurrent.futures.Future[T]":
        """Run `fn(*args)` on a worker thread.

        `abandoned`, once set (the client hung up), stops the work at its next
        check: `raise_if_abandoned`, before each image's decoding and before the
        predictor runs. A queued future is cancelled by the caller; this is for
        work already started, so a request nobody waits for does not hold a
        predictor for the next one.
        """
        if abandoned is None:
            return self._executor.submit(fn, *args)

        def run() -> T:
            self._local.abandoned = abandoned
            try:
                return fn(*args)
            finally:
                self._local.abandoned = None

        return self._executor.submit(run)

    def raise_if_abandoned(self) -> None:
        """`ClientClosed` if the work on this worker thread was abandoned by its client."""
        abandoned = getattr(self._local, "abandoned", None)
        if abandoned is not None and abandoned.is_set():
            raise ClientClosed("client disconnected; its inference was abandoned")

    def warm_up(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One inference on every worker's predictor; returns the outputs of the last."""
        barrier = threading.Barrier(self.threads)

        def once() -> list[np.ndarray]:
            barrier.wait(timeout=120)  # every worker thread takes exactly one task
            return self.infer(feeds)[0]

        futures = [self._executor.submit(once) for _ in range(self.threads)]
        return [f.result() for f in futures][-1]

    def shutdown(self) -> None:
        """Finish queued work, then stop the worker threads."""
        self._executor.shutdown(wait=True)


def _paddle_reason(exc: Exception) -> str:
    """The informative line of a Paddle error (its text is a C++ report of many lines)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if "Error:" in line:
            return line[:500]
    return (lines[-1] if lines else type(exc).__name__)[:500]
