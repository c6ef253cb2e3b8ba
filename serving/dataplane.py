"""One server process's data plane: its settings and the state the routes share.

`ServerState` holds what every request reads or changes: the loaded `ModelService`,
readiness (with worker processes, every worker's shared flag; a version that cannot
answer its sample stays live and never ready, `not_ready_reason` says why), the
in-flight count, the body budget (`BodyBudget`, `serving.limits`), the metrics and the
fault drill. The HTTP handlers (`serving.endpoints`) are methods over it.
"""

import asyncio
import dataclasses
import logging
import time
import traceback
from typing import Any, Callable, Sequence

from contracts.artifact import sha256_file
from contracts.errors import ExitCode
from serving.errors import ClientClosed, ModelDirError, RequestTimeout, ServingError, Unavailable
from serving.fault import FaultDrill
from serving.limits import HttpLimits
from serving.metrics import ServerMetrics
from serving.modeldir import ModelDir
from serving.preprocess import ImageOptions
from serving.runtime import PredictorPool, default_threads
from serving.service import ModelService, Result
from serving.settings import DEFAULTS

log = logging.getLogger("serving.server")

#: Warm-up errors a later try may not meet (busy, slow): never written off as lasting.
RETRY_LATER = (Unavailable, RequestTimeout, ClientClosed)
#: The kubelet keeps at most this much of a container's termination message.
TERMINATION_MESSAGE_BYTES = 4096


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """How one server process is configured: `serving.settings.ServeSettings` resolved
    against the loaded model (its name, version, threads); the defaults are its."""

    model_name: str
    model_version: str
    host: str = DEFAULTS.host
    port: int = 8000
    max_body_bytes: int = DEFAULTS.max_body_bytes
    max_in_flight: int = DEFAULTS.max_in_flight
    #: Seconds a client may take to send its body. Bodies are read before a request takes
    #: an in-flight slot, so slow senders cannot hold the slots; this bounds them anyway.
    body_timeout: float = DEFAULTS.body_timeout
    #: The digest the manifest says these weights have (the Deployment passes its
    #: annotation): the server hashes what it loads and refuses to serve anything else.
    weights_sha256: str | None = None
    threads: int = dataclasses.field(default_factory=default_threads)
    math_threads: int = DEFAULTS.math_threads
    graceful_timeout: float = DEFAULTS.graceful_timeout
    #: Server processes behind the one port (1: this process alone, no supervisor).
    workers: int = DEFAULTS.workers
    #: Adaptive batching (`runtime.Batcher`): at most this many images per predictor
    #: run; 1 turns batching off (the default).
    batch_max_size: int = DEFAULTS.batch_max_size
    #: The longest a request waits for others to join its batch.
    batch_timeout_ms: float = DEFAULTS.batch_timeout_ms
    #: A request runs on the event loop itself, not handed to a predictor thread, when
    #: nothing else is in flight, batching is off, recent requests took at most this
    #: long (0: never), and the request is light: raw tensors of at most one warm-up
    #: inference's size (`service.light_request`; never encoded images, whose decoding
    #: costs what the sender chooses), since the hand-off to a thread and back costs
    #: about as much as such a request (docs/inside-serving.md). Other work goes to the
    #: threads, so probes, /metrics and hang-up detection never wait behind more than
    #: about this.
    inline_max_ms: float = DEFAULTS.inline_max_ms
    #: How encoded images are decoded: pixel budget, deadline, reduced JPEG decoding.
    images: ImageOptions = ImageOptions()
    #: Request heads (size, fields, time) and the memory bodies may hold (`serving.limits`).
    limits: HttpLimits = HttpLimits()
    #: Where a warm-up failure no retry fixes is written before the process exits
    #: `ExitCode.CANNOT_SERVE` (the container's terminationMessagePath); None: stay live,
    #: never ready, `not_ready_reason` saying why.
    termination_log: str | None = None


class BodyBudget:
    """The bytes of request bodies this process holds (being read or in flight) and
    the most it may: what does not fit is refused (503: a retry may fit). Used
    on the event loop only."""

    def __init__(self, total: int, on_change: Callable[[int], None] = lambda held: None
                 ) -> None:
        """`on_change(held)` after every change (the server's gauge)."""
        self.total = total
        self.held = 0
        self.on_change = on_change

    def add(self, size: int) -> None:
        """`size` more bytes held (less when negative)."""
        self.held += size
        self.on_change(self.held)

    def refuse_unless_fits(self, size: int) -> None:
        """`Unavailable` when `size` more bytes would not fit now."""
        if self.held + size > self.total:
            raise Unavailable(
                f"overloaded: request bodies held take {self.held} of {self.total} bytes, "
                f"{size} more do not fit; retry later")

    def charge(self) -> "BodyCharge":
        """A new request's account: what it takes, given back once."""
        return BodyCharge(self)


class BodyCharge:
    """One request's bytes in a `BodyBudget`."""

    def __init__(self, budget: BodyBudget) -> None:
        self.budget = budget
        self.size = 0

    def take(self, size: int) -> None:
        """Count `size` more bytes of this request's body; `Unavailable` past the budget."""
        self.budget.refuse_unless_fits(size)
        self.budget.add(size)
        self.size += size

    def release(self) -> None:
        """Give back everything this request took (idempotent)."""
        if self.size:
            self.budget.add(-self.size)
            self.size = 0

    def keep_until(self, running: "asyncio.Future[Any]") -> None:
        """Give the bytes back when `running` ends, not at `release` (an abandoned
        request's worker may still hold its body)."""
        size, self.size = self.size, 0

        def give_back(_: "asyncio.Future[Any]") -> None:
            self.budget.add(-size)

        running.add_done_callback(give_back)


class ServerState:
    """Mutable state shared by the routes; touched only from the event loop
    except `service`/`ready`, which the loader thread sets once."""

    def __init__(self, settings: ServerSettings, model: ModelDir,
                 peers: Sequence[int] | None = None, index: int = 0) -> None:
        """`peers`: one ready flag per worker process, shared by all (None: one process);
        `index`: this worker's flag."""
        self.settings = settings
        self.model = model
        self.peers = peers
        self.index = index
        classes = model.infer_cfg.class_names() if model is not None else []
        self.metrics = ServerMetrics(settings.model_name, settings.model_version, classes)
        fault = model.infer_cfg.fault if model is not None else None  # None: tests' bare state
        seed = f"{settings.model_name}/{settings.model_version}"
        if peers is not None:  # each worker draws its own errors (the same rate)
            seed += f"/worker-{index}"
        self.drill = FaultDrill(fault, seed=seed)
        if self.drill.config is not None:  # a drill is on: say so loudly, once
            self.metrics.set_fault(self.drill.delay_seconds, self.drill.error_rate)
            log.warning(
                "FAULT DRILL ACTIVE: model %s version %s misbehaves on purpose (%s, "
                "from %s/infer_cfg.yml fault:); inference requests will be slowed or failed",
                settings.model_name, settings.model_version, self.drill.config.describe(),
                model.path,
            )
        self.service: ModelService | None = None
        self.ready = False
        self.shutting_down = False
        self.load_error: str | None = None
        #: Set when the process must end with this code (`_give_up`), None otherwise.
        self.exit_code: int | None = None
        self.not_ready_reason: str | None = None  # why it cannot answer (warm-up failed)
        self.in_flight = 0
        self.bodies = BodyBudget(
            settings.limits.body_budget(settings.max_in_flight, settings.max_body_bytes),
            self.metrics.buffered.set)
        self.on_load_failure: Callable[[], None] = lambda: None
        #: The event loop (set by the app's lifespan): the loader warms its predictor.
        self.loop: asyncio.AbstractEventLoop | None = None
        self.inline_warm = False  # the loop's own predictor is warmed up
        #: Recent requests' work (parse, run, answer), seconds: a moving average,
        #: None until one was timed (the first requests go to the threads).
        self.work_seconds: float | None = None

    def note_work(self, seconds: float) -> None:
        """Fold one request's work time into the moving average (any thread)."""
        last = self.work_seconds
        self.work_seconds = seconds if last is None else 0.8 * last + 0.2 * seconds

    def timed(self, job: Callable[[], Result]) -> Result:
        """`job()`, its time (also when it fails) folded into the moving average."""
        start = time.perf_counter()
        try:
            return job()
        finally:
            self.note_work(time.perf_counter() - start)

    def inline_ok(self, service: "ModelService") -> bool:
        """Run the next request on the event loop: idle, no batching, recent work short."""
        limit = self.settings.inline_max_ms / 1000.0
        recent = self.work_seconds
        return (self.inline_warm and self.in_flight == 0 and service.pool.batcher is None
                and recent is not None and recent <= limit)

    def set_ready(self, value: bool) -> None:
        self.ready = value
        self.metrics.ready.set(1 if value else 0)
        if self.peers is not None:
            self.peers[self.index] = 1 if value else 0  # type: ignore[index]

    def serving_ready(self) -> bool:
        """Ready to serve: this process, and every other worker behind the port."""
        if not self.ready or self.shutting_down:
            return False
        return self.peers is None or all(self.peers)

    def _warm_inline(self, service: "ModelService") -> None:
        """Warm the event loop's own predictor (a first run is slow) on the loop itself,
        from the loader thread, before ready; inline runs stay off if it cannot be."""
        loop = self.loop
        if loop is None or self.settings.inline_max_ms <= 0 or service.pool.batcher is not None:
            return

        async def warm() -> None:
            service.warm_up_here()

        asyncio.run_coroutine_threadsafe(warm(), loop).result(timeout=300)
        self.inline_warm = True

    def _give_up(self, path: str, reason: str) -> None:
        """Write `reason` to the termination message file and end the process with
        `ExitCode.CANNOT_SERVE`: the kubelet keeps the file's text as the container's
        `lastState.terminated.message` (at most 4 KiB) and restarts it."""
        data = reason.encode("utf-8", "replace")[:TERMINATION_MESSAGE_BYTES]
        try:
            with open(path, "wb") as out:
                out.write(data)
        except OSError as exc:  # the exit code still says it; the log says why not the file
            log.error("cannot write the termination message to %s: %s", path, exc)
        self.exit_code = ExitCode.CANNOT_SERVE
        self.on_load_failure()

    def load(self) -> None:
        """Create the predictors, warm every one up, then report ready."""
        try:
            # Here, not at the top: paddle costs seconds to import, and only a process that
            # loads a model needs it (tests build a bare state; `_serve_one` imports it first).
            import paddle

            settings = self.settings
            loaded = sha256_file(self.model.params_file)
            if settings.weights_sha256 and loaded != settings.weights_sha256:
                raise ModelDirError(
                    f"{self.model.params_file} has sha256 {loaded[:12]}…, the manifest says "
                    f"{settings.weights_sha256[:12]}…: refusing to serve other weights")
            claimed = self.model.record.get("weights_sha256")
            if claimed and claimed != loaded:
                log.warning("model.yaml claims weights sha256 %.12s…, the file has %.12s…",
                            claimed, loaded)
            pool = PredictorPool(self.model, settings.threads, settings.math_threads,
                                 batch_max_size=settings.batch_max_size,
                                 batch_timeout=settings.batch_timeout_ms / 1000.0)
            service = ModelService(self.model, settings.model_name, settings.model_version, pool,
                                   settings.images)
            try:  # ready means it answered: a sample request, as a client sends it
                service.warm_up()
                service.answer_sample()
                # Worked out here on the loader thread, not at a first request on the loop.
                log.debug("light requests: at most %d values", service.light_elements)
            except ServingError as exc:  # live, never ready, and the probe says why
                self.not_ready_reason = f"warm-up inference failed: {exc}"
                log.error("model %s version %s is not ready: %s", settings.model_name,
                          settings.model_version, self.not_ready_reason)
                if settings.termination_log and not isinstance(exc, RETRY_LATER):
                    self._give_up(settings.termination_log, self.not_ready_reason)
                return
            self._warm_inline(service)
            self.metrics.set_info(loaded, paddle.__version__)  # what runs, not a claim
            self.service = service
            if not self.shutting_down:
                self.set_ready(True)
            log.info(
                "model %s version %s ready (%d predictor threads)",
                settings.model_name, settings.model_version, settings.threads,
            )
        except Exception as exc:  # any load failure ends the process with a clear line
            self.load_error = str(exc)
            log.error("model load failed: %s", exc)
            log.debug("%s", traceback.format_exc())
            self.on_load_failure()
