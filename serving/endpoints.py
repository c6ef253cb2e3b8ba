"""The server's HTTP handlers: one method per route, over one server's data plane.

KServe's `V2Endpoints` shape (kserve/kserve,
python/kserve/kserve/protocol/rest/v2_endpoints.py) over `ServerState`
(`serving.dataplane`); `routes()` binds them. Around the request work of `service.py`
they add admission control (`max_in_flight`, 503 at once), body limits and the shared
body budget, work off the event loop, and fault drills. Why: docs/inside-serving.md.
"""

import asyncio
import logging
import sys
import time
from typing import Any, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from serving.dataplane import BodyCharge, ServerState
from serving.errors import (
    BadRequest,
    ClientClosed,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
    ServingError,
    Unavailable,
)
from serving.metrics import CONTENT_TYPE
from serving.probe import load_probe_set
from serving.protocol import HEADER_LENGTH, encode_json
from serving.runtime import Abandoned
from serving.service import ModelService, Parsed, Result

log = logging.getLogger("serving.server")

SERVER_NAME = "paddle-mlops"
SERVER_VERSION = "0.1.0"


def _json(doc: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(encode_json(doc), status, headers, media_type="application/json")


def _error(exc: ServingError) -> Response:
    return _json({"error": exc.message}, exc.status_code)


async def _read_body(request: Request, limit: int, charge: BodyCharge) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise BadRequest(f"Content-Length is not an integer: {declared!r}") from None
        if length > limit:
            raise PayloadTooLarge(f"body of {length} bytes exceeds the limit of {limit} bytes")
        charge.budget.refuse_unless_fits(length)  # 503 before reading what cannot fit
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"body exceeds the limit of {limit} bytes")
        charge.take(len(chunk))  # as it arrives: a slow sender holds what it sent
        chunks.append(chunk)
    return b"".join(chunks)


async def _read_body_within(request: Request, limit: int, seconds: float,
                            charge: BodyCharge) -> bytes:
    """`_read_body` or `asyncio.TimeoutError` after `seconds`. On 3.11+ with
    `asyncio.timeout`, which needs no task of its own (`wait_for` made one per
    request: ~15 us of a 0.7 ms request)."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await _read_body(request, limit, charge)
    return await asyncio.wait_for(_read_body(request, limit, charge), seconds)


async def _disconnected(request: Request) -> None:
    """Return once the client has hung up (the body is already read: the next
    ASGI message can only be the disconnect, or the end of the response)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass




class V2Endpoints:
    """The routes' handlers for one model version, over its data plane (`ServerState`)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.settings = state.settings
        self.metrics = state.metrics
        self.drill = state.drill
        #: The probe images this version ships (`serving/probe.py`), read once.
        self.probe_set = load_probe_set(state.model.path) if state.model is not None else []

    def _check_model(self, request: Request) -> None:
        name = request.path_params.get("model_name")
        if name is not None and name != self.settings.model_name:
            raise NotFound(
                f"unknown model '{name}'; this server serves '{self.settings.model_name}'")
        version = request.path_params.get("model_version")
        if version is not None and version != self.settings.model_version:
            raise NotFound(
                f"unknown version '{version}' of model '{self.settings.model_name}'; "
                f"this server serves version '{self.settings.model_version}'"
            )

    def _ready_service(self) -> ModelService:
        if self.state.shutting_down:
            raise Unavailable("server is shutting down")
        if not self.state.ready or self.state.service is None:
            raise Unavailable("model is not ready (loading or warming up)")
        return self.state.service

    async def _handle_inference(
        self, request: Request, parse: Callable[[ModelService, bytes, str | None], Parsed]
    ) -> Response:
        start = time.perf_counter()
        status = 500
        charge = self.state.bodies.charge()
        try:
            self._check_model(request)
            service = self._ready_service()
            if self.drill.active:  # inside the timing and counting: the drill must show in metrics
                injected = await self.drill.apply()
                if injected is not None:
                    status = injected
                    return _json({"error": self.drill.error_message()}, injected)
                service = self._ready_service()  # a shutdown may have begun during the delay
            # A body is not read for a request that would be refused anyway (the check is
            # made again once it is read: slots may have filled meanwhile).
            self._check_admission()
            # The body first, under a timeout, and only then a slot: 16 clients trickling
            # one byte each used to hold every slot and turn all inference into 503s.
            try:
                body = await _read_body_within(request, self.settings.max_body_bytes,
                                               self.settings.body_timeout, charge)
            except asyncio.TimeoutError:
                raise RequestTimeout(
                    f"body not received within {self.settings.body_timeout:g} s") from None
            except ClientDisconnect:
                raise ClientClosed("client disconnected before sending its body") from None
            self._check_admission()
            header_length = request.headers.get(HEADER_LENGTH)
            result = await self._run_unless_abandoned(
                request, service, lambda: parse(service, body, header_length), len(body),
                charge)
            self.metrics.inference_duration.observe(result.inference_seconds)
            for signals in result.quality:  # a successful answer, about to be sent
                self.metrics.observe_answer(signals)
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
            charge.release()  # a job still running keeps its body: see _run_unless_abandoned
            self.metrics.count(status)
            self.metrics.request_duration.observe(time.perf_counter() - start)

    def _check_admission(self) -> None:
        """`Unavailable` at the in-flight limit (at once: never queued)."""
        if self.state.in_flight >= self.settings.max_in_flight:
            raise Unavailable(
                f"overloaded: {self.state.in_flight} requests in flight "
                f"(limit {self.settings.max_in_flight}); retry later"
            )

    async def _run_unless_abandoned(
        self, request: Request, service: ModelService, parse: Callable[[], Parsed],
        body_size: int, charge: BodyCharge,
    ) -> Result:
        """Run the request on a predictor thread while the client waits for it (or,
        when it is light and the server idle, here on the event loop).

        A client that hangs up gets its queued work cancelled, or its running
        work stopped at the next image or before the predictor (a normal
        request used to wait 6 s behind two abandoned ones). The in-flight slot,
        and the body's bytes in the budget, are held until the worker is really
        done with them.

        Inline: a body small enough to hold a light request is parsed here (that
        costs less than the inference a light request is, and bounds it by its
        size); a light request then runs here, anything else goes to the threads
        already parsed. What earlier requests cost says nothing about this one: an
        expensive request after cheap ones held the loop, and `/v2/health/live`
        waited 2.5 s (the probe's timeout is 1 s).
        """
        job: Callable[[], Result] = lambda: service.answer(parse())  # noqa: E731
        if self.state.inline_ok(service) and body_size <= service.light_body_bytes:
            started = time.perf_counter()
            parsed = parse()
            if service.light(parsed):
                return self._run_inline(lambda: service.answer(parsed), started)
            job = lambda: service.answer(parsed)  # noqa: E731
        abandoned = Abandoned()
        future = service.pool.submit(self.state.timed, job, abandoned=abandoned)
        # The slot is taken once the work exists (nothing to give back if submit fails;
        # no await in between, so the admission check above still holds).
        self._take_slot()
        running = asyncio.wrap_future(future)
        running.add_done_callback(self._slot_released)
        hangup = asyncio.ensure_future(_disconnected(request))
        try:
            waiters: set[asyncio.Future[Any]] = {running, hangup}
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hangup.cancel()
        if not running.done():
            abandoned.set()
            future.cancel()
            charge.keep_until(running)  # the worker may still hold the body
            raise ClientClosed("client disconnected while its inference waited or ran")
        return running.result()

    def _run_inline(self, job: Callable[[], Result], started: float) -> Result:
        """`job` here on the event loop (`ServerState.inline_ok`), holding a slot;
        its time since `started` (its parsing too) folded into the recent work."""
        self._take_slot()
        self.metrics.inline.inc()
        try:
            return job()
        finally:
            self.state.note_work(time.perf_counter() - started)
            self._give_slot()

    def _take_slot(self) -> None:
        self.state.in_flight += 1
        self.metrics.in_flight.inc()

    def _give_slot(self) -> None:
        self.state.in_flight -= 1
        self.metrics.in_flight.dec()

    def _slot_released(self, running: "asyncio.Future[Result]") -> None:
        self._give_slot()
        if not running.cancelled():
            running.exception()  # retrieved: an abandoned request's error is nobody's to log

    async def infer(self, request: Request) -> Response:
        return await self._handle_inference(
            request, lambda s, body, hdr: s.parse_infer(body, hdr)
        )

    async def paddle_serving(self, request: Request) -> Response:
        return await self._handle_inference(request, lambda s, body, hdr: s.parse_compat(body))

    async def live(self, request: Request) -> Response:
        return _json({"live": True})

    async def ready(self, request: Request) -> Response:
        ok = self.state.serving_ready()
        reason = self.state.not_ready_reason
        why = {} if ok or not reason else {"reason": reason}
        return _json({"ready": ok, **why}, 200 if ok else 503)

    async def model_ready(self, request: Request) -> Response:
        try:
            self._check_model(request)
        except ServingError as exc:
            return _error(exc)
        ok = self.state.serving_ready()
        reason = self.state.not_ready_reason
        why = {} if ok or not reason else {"reason": reason}
        return _json({"name": self.settings.model_name, "ready": ok, **why}, 200 if ok else 503)

    async def model_metadata(self, request: Request) -> Response:
        try:
            self._check_model(request)
            return _json(self._ready_service().metadata())
        except ServingError as exc:
            return _error(exc)

    async def probe(self, request: Request) -> Response:
        """The probe images this version ships (`serving/probe.py`)."""
        try:
            self._check_model(request)
            if not self.probe_set:
                raise NotFound(f"version '{self.settings.model_version}' ships no probe images "
                               f"(a probe/ folder in its export)")
        except ServingError as exc:
            return _error(exc)
        return _json({"model_name": self.settings.model_name,
                      "model_version": self.settings.model_version, "images": self.probe_set})

    async def server_metadata(self, request: Request) -> Response:
        return _json({
            "name": SERVER_NAME,
            "version": SERVER_VERSION,
            "extensions": ["binary_tensor_data", "model_repository", "paddle_serving_compat"],
        })

    async def repository_index(self, request: Request) -> Response:
        state_name = "READY" if self.state.serving_ready() else "UNAVAILABLE"
        return _json([{
            "name": self.settings.model_name, "version": self.settings.model_version,
            "state": state_name,
        }])

    async def prometheus(self, request: Request) -> Response:
        return Response(self.metrics.exposition(), 200, media_type=CONTENT_TYPE)

    async def not_found(self, request: Request, exc: Exception) -> Response:
        return _json({"error": f"no route {request.method} {request.url.path}"}, 404)

    async def method_not_allowed(self, request: Request, exc: Exception) -> Response:
        return _json({"error": f"method {request.method} not allowed on {request.url.path}"}, 405)

    def routes(self) -> list[Route]:
        """The OIP v2 routes (and Paddle Serving's, and `/metrics`) bound to these handlers."""
        return [  # matched in order, one regex each: the inference routes first
            Route("/v2/models/{model_name}/infer", self.infer, methods=["POST"]),
            Route("/v2/models/{model_name}/versions/{model_version}/infer", self.infer,
                  methods=["POST"]),
            Route("/v2", self.server_metadata, methods=["GET"]),
            Route("/v2/health/live", self.live, methods=["GET"]),
            Route("/v2/health/ready", self.ready, methods=["GET"]),
            Route("/v2/models/{model_name}", self.model_metadata, methods=["GET"]),
            Route("/v2/models/{model_name}/versions/{model_version}", self.model_metadata,
                  methods=["GET"]),
            Route("/v2/models/{model_name}/ready", self.model_ready, methods=["GET"]),
            Route("/v2/models/{model_name}/versions/{model_version}/ready", self.model_ready,
                  methods=["GET"]),
            Route("/v2/models/{model_name}/probe", self.probe, methods=["GET"]),
            Route("/v2/models/{model_name}/versions/{model_version}/probe", self.probe,
                  methods=["GET"]),
            Route("/v2/repository/index", self.repository_index, methods=["POST"]),
            Route("/GeneralModelService/inference", self.paddle_serving, methods=["POST"]),
            Route("/metrics", self.prometheus, methods=["GET"]),
        ]

