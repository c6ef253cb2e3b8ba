"""The model server: OIP v2 over HTTP (Starlette + uvicorn) around `ModelService`.

Puts one process together and runs it under uvicorn: its data plane (`dataplane.py`),
the handlers over it (`endpoints.py`), the fault drill a model declares (`fault.py`),
`/metrics` (`metrics.py`) and, with `workers` > 1, a supervisor of worker processes on
one port (`supervisor.py`). Live at once, ready once a sample request was answered; on
SIGTERM not ready, in-flight requests finished, workers stopped. Why Starlette:
docs/inside-serving.md.
"""

import asyncio
import contextlib
import logging
import os
import socket
import threading
from typing import Any, AsyncIterator, Sequence

import uvicorn
from starlette.applications import Starlette

from serving.dataplane import ServerSettings, ServerState
from serving.endpoints import V2Endpoints
from serving.http_guard import guarded_protocol
from serving.limits import HttpLimits
from serving.metrics import MULTIPROC_ENV
from serving.modeldir import ModelDir
from serving.supervisor import fresh_metrics_dir, supervise

log = logging.getLogger("serving.server")

def build_app(state: ServerState) -> Starlette:
    """The ASGI application for one model version."""
    endpoints = V2Endpoints(state)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.loop = asyncio.get_running_loop()
        threading.Thread(target=state.load, name="model-loader", daemon=True).start()
        yield
        state.set_ready(False)
        if state.service is not None:
            await asyncio.get_running_loop().run_in_executor(None, state.service.pool.shutdown)

    return Starlette(
        routes=endpoints.routes(),
        lifespan=lifespan,
        exception_handlers={404: endpoints.not_found, 405: endpoints.method_not_allowed},
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


def _fast_io(limits: HttpLimits) -> dict[str, Any]:
    """uvicorn's C HTTP parser, with the request-head limits (`serving.http_guard`), and
    libuv event loop, named rather than left to "auto" (h11 costs ~0.5 ms more per
    request). httptools is a dependency: the head limits need it, so it is not probed."""
    options: dict[str, Any] = {"http": guarded_protocol(limits)}
    with contextlib.suppress(ImportError):
        import uvloop  # noqa: F401  optional wheel: probed here, not required

        options["loop"] = "uvloop"
    return options


def serve(model: ModelDir, settings: ServerSettings, log_level: str = "info") -> int:
    """Run the server until SIGINT/SIGTERM; returns the process exit code."""
    if settings.workers > 1:
        return supervise(model, settings, log_level, _serve_one)
    if os.environ.get(MULTIPROC_ENV):  # set from outside: its old files must not be summed in
        fresh_metrics_dir()
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
        **_fast_io(settings.limits),
    )
    server = _Server(config, state)

    def stop_on_failure() -> None:
        server.should_exit = True

    state.on_load_failure = stop_on_failure
    server.run(sockets=[sock] if sock is not None else None)
    if state.exit_code is not None:
        log.error("exiting with code %d: %s", state.exit_code, state.not_ready_reason)
        return state.exit_code
    if state.load_error is not None:
        log.error("exiting: %s", state.load_error)
        return 1
    return 0
