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
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any, AsyncIterator, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import StreamingResponse

from contracts.errors import MlopsError

TICK = 1.0
CHART_EVERY = 2
MAX_SECONDS = 30.0
log = logging.getLogger("mlops.ui")


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
            yield event("problem", {"error": str(exc)})
            return
        except Exception as exc:  # a bug: the log has the traceback, the page polls
            log.exception("event stream failed")
            yield event("problem", {"error": f"internal error ({type(exc).__name__})"})
            return
        yield ": tick\n\n"
        await asyncio.sleep(TICK)


def page_events(request: Request, build: Callable[[], dict[str, Any]],
                charts: Callable[[], list[dict[str, Any]]] | None,
                stopping: threading.Event) -> StreamingResponse:
    """The streaming response for one page."""
    return StreamingResponse(_frames(request, build, charts, stopping),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
