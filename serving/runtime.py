"""Paddle Inference predictors, used safely from concurrent requests.

`PredictorPool`: a fixed set of worker threads, each owning one predictor (a `clone()`
of the first), so no predictor is ever run by two threads; `warm_up` runs each once.
`Batcher`: adaptive batching (`batch_max_size` > 1, off by default) of same-shape
requests into one `run()`, a failed batch retried one request at a time. Why the
default timeout is 0: docs/inside-serving.md.
"""

import concurrent.futures
import dataclasses
import math
import os
import threading
import time
from typing import Any, Callable, Sequence, TypeVar

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


Outputs = list[np.ndarray]
#: outputs of one batched run and the images of each request in it -> outputs per request
Splitter = Callable[[Outputs, Sequence[int]], list[Outputs]]


def split_batch(outputs: Outputs, sizes: Sequence[int]) -> list[Outputs]:
    """Split every output along its first dimension, `sizes[i]` rows for request i."""
    total = sum(sizes)
    bounds = np.cumsum(sizes)[:-1]
    per_request: list[Outputs] = [[] for _ in sizes]
    for array in outputs:
        if array.ndim == 0 or array.shape[0] != total:
            raise ValueError(f"output of shape {list(array.shape)} has no batch dimension "
                             f"of {total}")
        for i, part in enumerate(np.split(array, bounds)):
            per_request[i].append(part)
    return per_request


@dataclasses.dataclass(eq=False)
class _Ticket:
    """One job submitted to a batching pool: counted as 'may still join a batch' until
    its inputs reach the batcher or the job ends without them."""

    expected: bool = True


class Abandoned:
    """Set on the event loop when a request's client hangs up; read by the worker thread.

    A plain flag (one attribute write and read are atomic under the GIL): a
    `threading.Event`, with its lock and condition, cost ~10 us of every request.
    """

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


@dataclasses.dataclass(eq=False)
class _Item:
    """One request's inputs waiting for (or in) a batch."""

    feeds: dict[str, np.ndarray]
    size: int
    key: Any
    abandoned: Abandoned | None
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    outputs: Outputs | None = None
    seconds: float = 0.0
    error: BaseException | None = None


def _batch_key(feeds: dict[str, np.ndarray]) -> tuple[Any, int]:
    """(what must match to stack, images in the request); a unique key when unbatchable."""
    sizes = {a.shape[0] if a.ndim else -1 for a in feeds.values()}
    if len(sizes) != 1 or -1 in sizes:
        return object(), 1
    key = tuple(sorted((n, a.dtype.str, a.shape[1:]) for n, a in feeds.items()))
    return key, sizes.pop()


class Batcher:
    """Stacks concurrent requests' inputs into one predictor run (see the module docstring)."""

    def __init__(self, run: Callable[[dict[str, np.ndarray]], Outputs], max_size: int,
                 timeout: float, split: Splitter = split_batch) -> None:
        self._run = run
        self.max_size = max_size
        self.timeout = timeout
        self.split = split
        self._cond = threading.Condition()
        self._queue: list[_Item] = []
        self._expected = 0  # jobs that may still bring inputs
        self._closed = False
        self.batches = 0  # runs and images, for tests and logs
        self.images = 0
        self._thread = threading.Thread(target=self._loop, name="batcher", daemon=True)
        self._thread.start()

    def expect(self) -> _Ticket:
        """A job was submitted: it may bring inputs soon."""
        with self._cond:
            self._expected += 1
        return _Ticket()

    def release(self, ticket: _Ticket) -> None:
        """The ticket's job arrived or ended (idempotent)."""
        with self._cond:
            if ticket.expected:
                ticket.expected = False
                self._expected -= 1
                self._cond.notify_all()

    def infer(self, feeds: dict[str, np.ndarray], ticket: _Ticket | None = None,
              abandoned: Abandoned | None = None) -> tuple[Outputs, float]:
        """Run `feeds` in the next fitting batch; blocks until its outputs are back."""
        key, size = _batch_key(feeds)
        item = _Item(feeds, size, key, abandoned)
        with self._cond:
            if self._closed:
                raise InferenceFailed("the server is stopping")
            self._queue.append(item)
            if ticket is not None and ticket.expected:
                ticket.expected = False
                self._expected -= 1
            self._cond.notify_all()
        item.done.wait()
        if item.error is not None:
            raise item.error
        assert item.outputs is not None
        return item.outputs, item.seconds

    def _take(self) -> list[_Item] | None:
        """The next batch: the oldest request and the queued ones that fit with it."""
        with self._cond:
            while not self._queue:
                if self._closed:
                    return None
                self._cond.wait()
            deadline = time.monotonic() + self.timeout
            while True:
                first = self._queue[0]
                batch, size = [first], first.size
                for item in self._queue[1:]:
                    if item.key == first.key and size + item.size <= self.max_size:
                        batch.append(item)
                        size += item.size
                remaining = deadline - time.monotonic()
                if size >= self.max_size or self._expected <= 0 or remaining <= 0:
                    break
                self._cond.wait(remaining)
            for item in batch:
                self._queue.remove(item)
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            live = [i for i in batch if i.abandoned is None or not i.abandoned.is_set()]
            for item in batch:
                if item not in live:
                    item.error = ClientClosed("client disconnected; its inference was abandoned")
                    item.done.set()
            if live:
                self._run_batch(live)

    def _run_batch(self, batch: list[_Item]) -> None:
        if len(batch) > 1:
            try:
                feeds = {n: np.concatenate([i.feeds[n] for i in batch]) for n in batch[0].feeds}
                start = time.perf_counter()
                outputs = self._run(feeds)
                seconds = time.perf_counter() - start
                parts = self.split(outputs, [i.size for i in batch])
            except Exception:  # noqa: BLE001 - each request alone says whose fault it was
                pass
            else:
                self.batches += 1
                self.images += sum(i.size for i in batch)
                for item, part in zip(batch, parts):
                    item.outputs, item.seconds = part, seconds
                    item.done.set()
                return
        for item in batch:
            try:
                start = time.perf_counter()
                item.outputs = self._run(item.feeds)
                item.seconds = time.perf_counter() - start
                self.batches += 1
                self.images += item.size
            except BaseException as exc:  # noqa: BLE001 - handed to the request's thread
                item.error = exc
            item.done.set()

    def close(self) -> None:
        """Finish what is queued, then stop the batching thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=60)


class PredictorPool:
    """Worker threads, each with its own predictor; `submit` runs work on one.

    With `batch_max_size` > 1 the predictor runs on a `Batcher`'s thread instead,
    and there are at least `batch_max_size` worker threads (so that many requests
    can be prepared and waiting for one batch).
    """

    def __init__(self, model: ModelDir, threads: int, math_threads: int = 1,
                 batch_max_size: int = 1, batch_timeout: float = 0.0) -> None:
        self.model = model
        if batch_max_size > 1:
            threads = max(threads, batch_max_size)
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
        self.batcher: Batcher | None = None
        if batch_max_size > 1:
            self.batcher = Batcher(self.run_here, batch_max_size, batch_timeout)

    def set_splitter(self, split: Splitter) -> None:
        """How a batched run's outputs are split per request (default: `split_batch`)."""
        if self.batcher is not None:
            self.batcher.split = split

    def run_here(self, feeds: dict[str, np.ndarray]) -> Outputs:
        """Run the calling thread's own predictor, cloned on its first call (a worker
        thread's, the batching thread's, or the event loop's for inline requests)."""
        try:
            return run_predictor(self._predictor(), feeds)
        except Exception as exc:  # paddle raises ValueError/RuntimeError with C++ text
            raise InferenceFailed(f"inference failed: {_paddle_reason(exc)}") from exc

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
        if self.batcher is not None:
            return self.batcher.infer(feeds, getattr(self._local, "ticket", None),
                                      getattr(self._local, "abandoned", None))
        start = time.perf_counter()
        outputs = self.run_here(feeds)
        return outputs, time.perf_counter() - start

    def submit(self, fn: Callable[..., T], *args: Any,
               abandoned: Abandoned | None = None) -> "concurrent.futures.Future[T]":
        """Run `fn(*args)` on a worker thread.

        `abandoned`, once set (the client hung up), stops the work at its next
        check: `raise_if_abandoned`, before each image's decoding and before the
        predictor runs. A queued future is cancelled by the caller; this is for
        work already started, so a request nobody waits for does not hold a
        predictor for the next one.
        """
        batcher = self.batcher
        if abandoned is None and batcher is None:
            return self._executor.submit(fn, *args)
        ticket = batcher.expect() if batcher is not None else None

        def run() -> T:
            self._local.abandoned = abandoned
            self._local.ticket = ticket
            try:
                return fn(*args)
            finally:
                self._local.abandoned = None
                self._local.ticket = None
                if ticket is not None and batcher is not None:
                    batcher.release(ticket)

        future = self._executor.submit(run)
        if ticket is not None and batcher is not None:  # also when cancelled while queued
            future.add_done_callback(lambda _: batcher.release(ticket))
        return future

    def raise_if_abandoned(self) -> None:
        """`ClientClosed` if the work on this worker thread was abandoned by its client."""
        abandoned = getattr(self._local, "abandoned", None)
        if abandoned is not None and abandoned.is_set():
            raise ClientClosed("client disconnected; its inference was abandoned")

    def warm_up(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One inference on every worker's predictor; returns the outputs of the last.

        With batching: on the batching thread's predictor, once alone and once as a
        full batch (the first run of a new batch size is the slow one)."""
        if self.batcher is not None:
            full = {n: np.concatenate([a] * self.batcher.max_size) for n, a in feeds.items()}
            self.batcher.infer(full)
            return self.batcher.infer(feeds)[0]
        barrier = threading.Barrier(self.threads)

        def once() -> list[np.ndarray]:
            barrier.wait(timeout=120)  # every worker thread takes exactly one task
            return self.infer(feeds)[0]

        futures = [self._executor.submit(once) for _ in range(self.threads)]
        return [f.result() for f in futures][-1]

    def shutdown(self) -> None:
        """Finish queued work, then stop the worker threads (and the batching thread)."""
        self._executor.shutdown(wait=True)
        if self.batcher is not None:
            self.batcher.close()


def _paddle_reason(exc: Exception) -> str:
    """The informative line of a Paddle error (its text is a C++ report of many lines)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if "Error:" in line:
            return line[:500]
    return (lines[-1] if lines else type(exc).__name__)[:500]
