"""The model server: OIP v2 over HTTP (Starlette + uvicorn) around `ModelService`.

What this module adds to the request work of `service.py`:

* **Admission control.** At most `max_in_flight` inference requests are
  admitted; the next one is answered 503 at once instead of queueing, so an
  overload shows up as fast errors and bounded memory, not as a growing
  queue. Admitted requests wait for one of `threads` predictor workers.
  (uvicorn's own `limit_concurrency` is not used: it would also turn away
  health probes and metric scrapes exactly when they matter most.)
* **Body limit.** `Content-Length` above `max_body_bytes` is refused (413)
  before reading; a chunked body is counted while streaming and cut off at
  the limit.
* **Off the event loop.** Parsing, preprocessing, the predictor and
  serialisation all run on the worker threads; the loop only moves bytes.
* **Readiness.** The HTTP port opens first (live, not ready); the model is
  loaded, every predictor warmed up and one sample request answered on a
  background thread, then ready. A version that cannot answer its sample
  stays live and never ready; the ready routes say why (`reason`).
  On SIGTERM the server reports not-ready at once, stops accepting, lets
  in-flight requests finish, then stops the workers.
* **Metrics** on `/metrics` (see `metrics.py`), including the quality
  signals of every successful encoded-image answer (`quality.py`).
* **Worker processes** (`workers` > 1, `mlops serve --workers N`). A Paddle
  predictor's `run()` holds the GIL, so threads of one process do not add
  throughput; N processes do. The supervisor (this process) binds the port
  once and starts N workers that accept on the same listening socket (the
  kernel hands each connection to one of them; uvicorn's own multi-worker
  mode does the same), each with its own model load, predictors and event
  loop. Rules: metrics are the sum over workers (`metrics.py`); a worker
  answers ready only when *every* worker is ready (they share one flag per
  worker), so a probe never sees a half-loaded server; SIGTERM/SIGINT to the
  supervisor is passed to every worker, which drains as above; a worker that
  exits on its own (a failed load, the weights check) stops the others and
  the supervisor exits with its code, so the pod restarts as a whole; a
  worker whose supervisor dies (even by SIGKILL) gets SIGTERM from the kernel
  (`PR_SET_PDEATHSIG`), so no worker outlives it. With `workers` = 1 (the
  default) there is no supervisor: the server runs in this process as before.
* **Fault drills.** A model whose `infer_cfg.yml` declares `fault:` gets
  its delay and injected errors on the inference routes (`FaultDrill`), inside
  the request timing and counting, so a canary rollback can be rehearsed
  against the very metrics the promotion controller reads.

Starlette rather than FastAPI: every body is parsed from raw bytes with
orjson (a pydantic body model costs more than the inference), so FastAPI's
validation layer would be unused weight on the hot path.
"""

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import multiprocessing
import multiprocessing.connection
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, AsyncIterator, Callable, Sequence

import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from contracts.artifact import sha256_file
from serving.errors import (
    BadRequest,
    ClientClosed,
    ModelDirError,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
    ServingError,
    Unavailable,
)
from serving.fault import FaultConfig
from serving.metrics import CONTENT_TYPE, MULTIPROC_ENV, ServerMetrics
from serving.modeldir import ModelDir, load_model_dir
from serving.preprocess import ImageOptions
from serving.probe import load_probe_set
from serving.protocol import HEADER_LENGTH, encode_json
from serving.runtime import Abandoned, PredictorPool, default_threads
from serving.service import ModelService, Result

log = logging.getLogger("serving.server")

SERVER_NAME = "paddle-mlops"
SERVER_VERSION = "0.1.0"


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """How one server process is configured (the `mlops serve` flags)."""

    model_name: str
    model_version: str
    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 8 * 1024 * 1024
    max_in_flight: int = 16
    #: Seconds a client may take to send its body. Bodies are read before a request takes
    #: an in-flight slot, so slow senders cannot hold the slots; this bounds them anyway.
    body_timeout: float = 10.0
    #: The digest the manifest says these weights have (the Deployment passes its
    #: annotation): the server hashes what it loads and refuses to serve anything else.
    weights_sha256: str | None = None
    threads: int = dataclasses.field(default_factory=default_threads)
    math_threads: int = 1
    graceful_timeout: float = 30.0
    #: Server processes behind the one port (1: this process alone, no supervisor).
    workers: int = 1
    #: Adaptive batching (`runtime.Batcher`): at most this many images per predictor
    #: run; 1 turns batching off (the default).
    batch_max_size: int = 1
    #: The longest a request waits for others to join its batch.
    batch_timeout_ms: float = 0.0
    #: A request runs on the event loop itself, not handed to a predictor thread, when
    #: nothing else is in flight, batching is off and recent requests took at most this
    #: long (0: never). The hand-off there and back cost ~0.2 ms a request: the shapes
    #: example's JSON request at concurrency 1 went from 0.84 to 0.94 of the bare loop
    #: in an A/B on this 2-core machine (serving/README.md, Performance). Longer work
    #: goes to the threads, so probes, /metrics and hang-up detection never wait behind
    #: more than this.
    inline_max_ms: float = 20.0
    #: How encoded images are decoded: pixel budget, deadline, reduced JPEG decoding.
    images: ImageOptions = ImageOptions()


class FaultDrill:
    """The model's declared fault drill (`infer_cfg.yml` `fault:`), applied per request.

    Like a service mesh's HTTPFault, delay and abort come before the request
    is admitted: a delayed request holds no in-flight slot and no predictor
    (so a slow drill shows as latency, not as 503s from the in-flight limit)
    and an aborted one costs no inference. The delay is an `asyncio.sleep`,
    never a blocked thread. Which requests fail is drawn from a generator
    seeded with the model name and version: a rehearsal is reproducible, and
    over many requests the share of errors approaches `error_rate`.
    """

    def __init__(self, fault: FaultConfig | None, seed: str) -> None:
        self.config = fault if fault is not None and fault.active else None
        self.delay_seconds = self.config.delay_ms / 1000.0 if self.config else 0.0
        self.error_rate = self.config.error_rate if self.config else 0.0
        self.error_status = self.config.error_status if self.config else 500
        self._rng = random.Random(seed)  # touched only from the event loop

    @property
    def active(self) -> bool:
        return self.config is not None

    async def apply(self) -> int | None:
        """Wait the declared delay; return the status to answer with, or None to serve."""
        if self.delay_seconds > 0:
            await asyncio.sleep(self.delay_seconds)
        if self.error_rate > 0 and self._rng.random() < self.error_rate:
            return self.error_status
        return None

    def error_message(self) -> str:
        return (
            f"fault drill: injected error {self.error_status} (this model version declares "
            f"fault.error_rate={self.error_rate:g} in infer_cfg.yml)"
        )


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
        self.not_ready_reason: str | None = None  # why it cannot answer (warm-up failed)
        self.in_flight = 0
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

    def load(self) -> None:
        """Create the predictors, warm every one up, then report ready."""
        try:
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
            except ServingError as exc:  # live, never ready, and the probe says why
                self.not_ready_reason = f"warm-up inference failed: {exc}"
                log.error("model %s version %s is not ready: %s", settings.model_name,
                          settings.model_version, self.not_ready_reason)
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


def _json(doc: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(encode_json(doc), status, headers, media_type="application/json")


def _error(exc: ServingError) -> Response:
    return _json({"error": exc.message}, exc.status_code)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise BadRequest(f"Content-Length is not an integer: {declared!r}") from None
        if length > limit:
            raise PayloadTooLarge(f"body of {length} bytes exceeds the limit of {limit} bytes")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _read_body_within(request: Request, limit: int, seconds: float) -> bytes:
    """`_read_body` or `asyncio.TimeoutError` after `seconds`. On 3.11+ with
    `asyncio.timeout`, which needs no task of its own (`wait_for` made one per
    request: ~15 us of a 0.7 ms request)."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await _read_body(request, limit)
    return await asyncio.wait_for(_read_body(request, limit), seconds)


async def _disconnected(request: Request) -> None:
    """Return once the client has hung up (the body is already read: the next
    ASGI message can only be the disconnect, or the end of the response)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def build_app(state: ServerState) -> Starlette:
    """The ASGI application for one model version."""
    settings = state.settings
    metrics = state.metrics
    drill = state.drill

    def check_model(request: Request) -> None:
        name = request.path_params.get("model_name")
        if name is not None and name != settings.model_name:
            raise NotFound(f"unknown model '{name}'; this server serves '{settings.model_name}'")
        version = request.path_params.get("model_version")
        if version is not None and version != settings.model_version:
            raise NotFound(
                f"unknown version '{version}' of model '{settings.model_name}'; "
                f"this server serves version '{settings.model_version}'"
            )

    def ready_service() -> ModelService:
        if state.shutting_down:
            raise Unavailable("server is shutting down")
        if not state.ready or state.service is None:
            raise Unavailable("model is not ready (loading or warming up)")
        return state.service

    async def handle_inference(
        request: Request, work: Callable[[ModelService, bytes, str | None], Result]
    ) -> Response:
        start = time.perf_counter()
        status = 500
        try:
            check_model(request)
            service = ready_service()
            if drill.active:  # inside the timing and counting: the drill must show in metrics
                injected = await drill.apply()
                if injected is not None:
                    status = injected
                    return _json({"error": drill.error_message()}, injected)
                service = ready_service()  # a shutdown may have begun during the delay
            # The body first, under a timeout, and only then a slot: 16 clients trickling
            # one byte each used to hold every slot and turn all inference into 503s.
            try:
                body = await _read_body_within(request, settings.max_body_bytes,
                                               settings.body_timeout)
            except asyncio.TimeoutError:
                raise RequestTimeout(
                    f"body not received within {settings.body_timeout:g} s") from None
            except ClientDisconnect:
                raise ClientClosed("client disconnected before sending its body") from None
            if state.in_flight >= settings.max_in_flight:
                raise Unavailable(
                    f"overloaded: {state.in_flight} requests in flight "
                    f"(limit {settings.max_in_flight}); retry later"
                )
            header_length = request.headers.get(HEADER_LENGTH)
            result = await run_unless_abandoned(
                request, service, lambda: work(service, body, header_length))
            metrics.inference_duration.observe(result.inference_seconds)
            for signals in result.quality:  # a successful answer, about to be sent
                metrics.observe_answer(signals)
            if result.header_length is None:
                response = Response(result.body, 200, media_type="application/json")
            else:
                response = Response(
                    result.body, 200,
                    {"Inference-Header-Content-Length": str(result.header_length)},
                    media_type="application/octet-stream",
                )
            status = 200
            return response
        except ServingError as exc:
            status = exc.status_code
            if status >= 500 and not isinstance(exc, Unavailable):
                log.error("%s %s: %s", request.method, request.url.path, exc.message)
            return _error(exc)
        except Exception as exc:  # a bug, not the caller's fault: 500 and keep serving
            log.exception("unexpected error on %s", request.url.path)
            return _json({"error": f"internal error: {type(exc).__name__}: {exc}"}, 500)
        finally:
            metrics.count(status)
            metrics.request_duration.observe(time.perf_counter() - start)

    async def run_unless_abandoned(
        request: Request, service: ModelService, job: Callable[[], Result]
    ) -> Result:
        """Run `job` on a predictor thread while the client waits for it.

        A client that hangs up gets its queued work cancelled, or its running
        work stopped at the next image or before the predictor (a normal
        request used to wait 6 s behind two abandoned ones). The in-flight slot
        is held until the worker is really done with it.
        """
        if state.inline_ok(service):
            return run_inline(job)
        abandoned = Abandoned()
        future = service.pool.submit(state.timed, job, abandoned=abandoned)
        # The slot is taken once the work exists (nothing to give back if submit fails;
        # no await in between, so the admission check above still holds).
        take_slot()
        running = asyncio.wrap_future(future)
        running.add_done_callback(slot_released)
        hangup = asyncio.ensure_future(_disconnected(request))
        try:
            waiters: set[asyncio.Future[Any]] = {running, hangup}
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hangup.cancel()
        if not running.done():
            abandoned.set()
            future.cancel()
            raise ClientClosed("client disconnected while its inference waited or ran")
        return running.result()

    def run_inline(job: Callable[[], Result]) -> Result:
        """`job` here on the event loop (`ServerState.inline_ok`), holding a slot."""
        take_slot()
        metrics.inline.inc()
        try:
            return state.timed(job)
        finally:
            give_slot()

    def take_slot() -> None:
        state.in_flight += 1
        metrics.in_flight.inc()

    def give_slot() -> None:
        state.in_flight -= 1
        metrics.in_flight.dec()

    def slot_released(running: "asyncio.Future[Result]") -> None:
        give_slot()
        if not running.cancelled():
            running.exception()  # retrieved: an abandoned request's error is nobody's to log

    async def infer(request: Request) -> Response:
        return await handle_inference(
            request, lambda s, body, hdr: s.infer_body(body, hdr)
        )

    async def paddle_serving(request: Request) -> Response:
        return await handle_inference(request, lambda s, body, hdr: s.compat_body(body))

    async def live(request: Request) -> Response:
        return _json({"live": True})

    async def ready(request: Request) -> Response:
        ok = state.serving_ready()
        why = {} if ok or not state.not_ready_reason else {"reason": state.not_ready_reason}
        return _json({"ready": ok, **why}, 200 if ok else 503)

    async def model_ready(request: Request) -> Response:
        try:
            check_model(request)
        except ServingError as exc:
            return _error(exc)
        ok = state.serving_ready()
        why = {} if ok or not state.not_ready_reason else {"reason": state.not_ready_reason}
        return _json({"name": settings.model_name, "ready": ok, **why}, 200 if ok else 503)

    async def model_metadata(request: Request) -> Response:
        try:
            check_model(request)
            return _json(ready_service().metadata())
        except ServingError as exc:
            return _error(exc)

    probe_set = load_probe_set(state.model.path) if state.model is not None else []

    async def probe(request: Request) -> Response:
        """The probe images this version ships (`serving/probe.py`)."""
        try:
            check_model(request)
            if not probe_set:
                raise NotFound(f"version '{settings.model_version}' ships no probe images "
                               f"(a probe/ folder in its export)")
        except ServingError as exc:
            return _error(exc)
        return _json({"model_name": settings.model_name,
                      "model_version": settings.model_version, "images": probe_set})

    async def server_metadata(request: Request) -> Response:
        return _json({
            "name": SERVER_NAME,
            "version": SERVER_VERSION,
            "extensions": ["binary_tensor_data", "model_repository", "paddle_serving_compat"],
        })

    async def repository_index(request: Request) -> Response:
        state_name = "READY" if state.serving_ready() else "UNAVAILABLE"
        return _json([{
            "name": settings.model_name, "version": settings.model_version, "state": state_name,
        }])

    async def prometheus(request: Request) -> Response:
        return Response(metrics.exposition(), 200, media_type=CONTENT_TYPE)

    async def not_found(request: Request, exc: Exception) -> Response:
        return _json({"error": f"no route {request.method} {request.url.path}"}, 404)

    async def method_not_allowed(request: Request, exc: Exception) -> Response:
        return _json({"error": f"method {request.method} not allowed on {request.url.path}"}, 405)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.loop = asyncio.get_running_loop()
        threading.Thread(target=state.load, name="model-loader", daemon=True).start()
        yield
        state.set_ready(False)
        if state.service is not None:
            await asyncio.get_running_loop().run_in_executor(None, state.service.pool.shutdown)

    routes = [  # matched in order, one regex each: the inference routes first
        Route("/v2/models/{model_name}/infer", infer, methods=["POST"]),
        Route("/v2/models/{model_name}/versions/{model_version}/infer", infer, methods=["POST"]),
        Route("/v2", server_metadata, methods=["GET"]),
        Route("/v2/health/live", live, methods=["GET"]),
        Route("/v2/health/ready", ready, methods=["GET"]),
        Route("/v2/models/{model_name}", model_metadata, methods=["GET"]),
        Route("/v2/models/{model_name}/versions/{model_version}", model_metadata, methods=["GET"]),
        Route("/v2/models/{model_name}/ready", model_ready, methods=["GET"]),
        Route(
            "/v2/models/{model_name}/versions/{model_version}/ready", model_ready, methods=["GET"]
        ),
        Route("/v2/models/{model_name}/probe", probe, methods=["GET"]),
        Route("/v2/models/{model_name}/versions/{model_version}/probe", probe, methods=["GET"]),
        Route("/v2/repository/index", repository_index, methods=["POST"]),
        Route("/GeneralModelService/inference", paddle_serving, methods=["POST"]),
        Route("/metrics", prometheus, methods=["GET"]),
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={404: not_found, 405: method_not_allowed},
    )


class _Server(uvicorn.Server):
    """uvicorn's server, but not-ready from the first signal of shutdown."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.state = state

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.state.shutting_down = True
        self.state.set_ready(False)
        super().handle_exit(sig, frame)


def _fast_io() -> dict[str, str]:
    """uvicorn's C HTTP parser and libuv event loop, named rather than left to "auto"
    (a missing wheel must not silently fall back to h11: ~0.5 ms more per request)."""
    options: dict[str, str] = {}
    with contextlib.suppress(ImportError):
        import httptools  # noqa: F401

        options["http"] = "httptools"
    with contextlib.suppress(ImportError):
        import uvloop  # noqa: F401

        options["loop"] = "uvloop"
    return options


def serve(model: ModelDir, settings: ServerSettings, log_level: str = "info") -> int:
    """Run the server until SIGINT/SIGTERM; returns the process exit code."""
    if settings.workers > 1:
        return _supervise(model, settings, log_level)
    if os.environ.get(MULTIPROC_ENV):  # set from outside: its old files must not be summed in
        _fresh_metrics_dir()
    return _serve_one(model, settings, log_level)


def _serve_one(model: ModelDir, settings: ServerSettings, log_level: str,
               sock: socket.socket | None = None, peers: Sequence[int] | None = None,
               index: int = 0) -> int:
    """One server process: the whole server, or one worker on the supervisor's socket."""
    # Importing paddle installs C-level handlers for SIGTERM/SIGINT that abort
    # the process ("FatalError: Termination signal"). Import it before uvicorn
    # installs its own handlers, so uvicorn's graceful shutdown wins.
    import paddle.inference  # noqa: F401

    state = ServerState(settings, model, peers, index)
    config = uvicorn.Config(
        build_app(state),
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        access_log=False,
        # uvicorn hands it to asyncio.wait_for, so seconds as a float work; its hint says int.
        timeout_graceful_shutdown=settings.graceful_timeout,  # type: ignore[arg-type]
        lifespan="on",
        **_fast_io(),  # type: ignore[arg-type]
    )
    server = _Server(config, state)

    def stop_on_failure() -> None:
        server.should_exit = True

    state.on_load_failure = stop_on_failure
    server.run(sockets=[sock] if sock is not None else None)
    if state.load_error is not None:
        log.error("exiting: %s", state.load_error)
        return 1
    return 0


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


def _worker_main(sock: socket.socket, model_path: str, settings: ServerSettings,
                 log_level: str, peers: Sequence[int], index: int, parent_pid: int) -> None:
    """Entry point of one worker process (spawned: a fresh interpreter)."""
    _die_with(parent_pid)
    logging.basicConfig(level=log_level.upper(),
                        format=f"%(asctime)s %(name)s[w{index}] %(levelname)s %(message)s")
    try:
        model = load_model_dir(model_path)
    except ModelDirError as exc:
        log.error("exiting: %s", exc)
        raise SystemExit(1) from None
    raise SystemExit(_serve_one(model, settings, log_level, sock, peers, index))


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


def _fresh_metrics_dir() -> tuple[str, bool]:
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


def _supervise(model: ModelDir, settings: ServerSettings, log_level: str) -> int:
    """Start `settings.workers` worker processes on one socket; see the module docstring."""
    from prometheus_client import multiprocess

    sock = _bind(settings.host, settings.port)
    metrics_dir, created = _fresh_metrics_dir()
    os.environ[MULTIPROC_ENV] = metrics_dir  # inherited by the workers before they import
    context = multiprocessing.get_context("spawn")  # no fork of a process with threads
    peers = context.Array("b", settings.workers, lock=False)
    workers = [
        context.Process(
            target=_worker_main, name=f"mlops-serve-worker-{i}",
            args=(sock, str(model.path), settings, log_level, peers, i, os.getpid()),
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
