"""Server-sent events for the page: pushed updates, with the page's poll as the fallback.

One stream per open page (`GET /api/events?page=models`, `text/event-stream`): the
page's JSON document as `event: page` whenever it differs from the last one sent,
checked every `TICK` seconds, and on the Models page the charts of each model as
`event: charts` every `CHART_EVERY` ticks (range queries cost more than the page).
A comment line keeps idle connections open through proxies. A stream ends by
itself after `MAX_SECONDS` (the browser's EventSource reconnects at once, `retry:`),
when the client goes away, or when the app stops -- so a shutdown never waits on it.
Errors inside a build go out as `event: problem` with the person-meant line; the page
then polls, which shows the error the way it always has.

Every open stream of a page shares one build per tick (:class:`Shared`): ten tabs cost
what one costs. How many streams may be open is `mlops.ui.guard.StreamSlots`'s; the
response gives its slot back when it ends, however it ends (:class:`EventResponse`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import Any, AsyncIterator, Callable, Generic, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import StreamingResponse

from contracts.errors import MlopsError
from gitops.git import redact

TICK = 1.0
CHART_EVERY = 2
MAX_SECONDS = 30.0
log = logging.getLogger("mlops.ui")
T = TypeVar("T")


class Shared(Generic[T]):
    """One `build()` per `ttl` seconds however many streams ask; the others get its result
    (an error is not kept: the next caller builds again)."""

    def __init__(self, build: Callable[[], T], ttl: float = TICK * 0.9,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.build, self.ttl, self.clock = build, ttl, clock
        self._lock = threading.Lock()
        self._value: T | None = None
        self._at: float | None = None

    def __call__(self) -> T:
        with self._lock:
            if self._at is not None and self.clock() - self._at < self.ttl:
                return self._value  # type: ignore[return-value]
            value = self.build()
            self._value, self._at = value, self.clock()
            return value


class EventResponse(StreamingResponse):
    """A stream that calls `release` once when it ends: finished, client gone or stopped."""

    def __init__(self, content: AsyncIterator[str], release: Callable[[], None] | None,
                 **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self._release is not None:
                release, self._release = self._release, None
                release()


def event(kind: str, data: Any) -> str:
    """One SSE message (pure): `event:` line, one `data:` line of compact JSON, blank line."""
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def _frames(request: Request, build: Callable[[], dict[str, Any]],
                  charts: Callable[[], list[dict[str, Any]]] | None,
                  stopping: threading.Event) -> AsyncIterator[str]:
    yield "retry: 1000\n\n"
    last = ""
    for tick in range(int(MAX_SECONDS / TICK)):
        if stopping.is_set() or await request.is_disconnected():
            return
        try:
            doc = await run_in_threadpool(build)
            text = json.dumps(doc, sort_keys=True)
            if text != last:
                last = text
                yield event("page", doc)
            if charts is not None and tick % CHART_EVERY == 0:
                for chart in await run_in_threadpool(charts):
                    yield event("charts", chart)
        except MlopsError as exc:
            yield event("problem", {"error": redact(str(exc))})
            return
        except Exception as exc:  # a bug: the log has the traceback, the page polls
            log.exception("event stream failed")
            yield event("problem", {"error": f"internal error ({type(exc).__name__})"})
            return
        yield ": tick\n\n"
        await asyncio.sleep(TICK)


def page_events(request: Request, build: Callable[[], dict[str, Any]],
                charts: Callable[[], list[dict[str, Any]]] | None,
                stopping: threading.Event,
                release: Callable[[], None] | None = None) -> StreamingResponse:
    """The streaming response for one page (`release`: called once when it ends)."""
    return EventResponse(_frames(request, build, charts, stopping), release,
                         media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
