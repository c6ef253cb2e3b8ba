"""What guards every answer of `mlops ui`: its security headers and the cap on event streams.

* :class:`SecurityHeaders` -- ASGI middleware, outermost, so every response carries
  them (pages, JSON, static files, 404s, the host check's 400): a Content-Security-Policy
  that lets the page run only its own script files (`script-src 'self'`: no inline
  script, no inline handler, no `javascript:` URL, no eval) and parse markup only
  through its one Trusted Types policy (`static/html.js`), plus `nosniff`, no framing
  and no referrer. A string from the server -- a Prometheus error, a panel title, a PR
  body -- that slipped past the escaping would still not run.
* :class:`StreamSlots` -- how many event streams may be open: per server and per client.
  A stream costs a connection and a build each tick; without a cap 400 of them slowed
  `/api/info` from milliseconds to seconds. Beyond the cap a
  request is refused (503 for the server, 429 for one client, with `Retry-After`) and
  the page polls instead.
"""

from __future__ import annotations

import threading
from typing import Any, Awaitable, Callable, MutableMapping

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message],
                                                                        Awaitable[None]]],
                   Awaitable[None]]

#: The name of the one Trusted Types policy (created in static/html.js).
TRUSTED_TYPES_POLICY = "mlops-html"

CSP = "; ".join([
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self'",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
    "require-trusted-types-for 'script'",
    f"trusted-types {TRUSTED_TYPES_POLICY}",
])

HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
}


class SecurityHeaders:
    """Adds :data:`HEADERS` to every HTTP response (replacing any of the same name)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in HEADERS.items()]

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k for k, _ in self._raw}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message["headers"] = kept + self._raw
            await send(message)

        await self.app(scope, receive, with_headers)


class StreamSlots:
    """Open event streams, counted per server and per client (thread-safe, no I/O)."""

    def __init__(self, total: int, per_client: int) -> None:
        if total < 1 or per_client < 1:
            raise ValueError("stream caps must be at least 1")
        self.total = total
        self.per_client = per_client
        self._open: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, client: str) -> tuple[int, str] | None:
        """Hold a slot for `client`; None when taken, else (HTTP status, the reason)."""
        with self._lock:
            if sum(self._open.values()) >= self.total:
                return 503, (f"events: this UI already serves {self.total} event streams "
                             "(its cap); the page polls instead")
            if self._open.get(client, 0) >= self.per_client:
                return 429, (f"events: {self.per_client} event streams are open from this "
                             "client (its cap); close a tab, or the page polls instead")
            self._open[client] = self._open.get(client, 0) + 1
            return None

    def give(self, client: str) -> None:
        """Free one slot of `client` (once per successful `take`)."""
        with self._lock:
            left = self._open.get(client, 0) - 1
            if left > 0:
                self._open[client] = left
            else:
                self._open.pop(client, None)

    def count(self, client: str | None = None) -> int:
        with self._lock:
            return sum(self._open.values()) if client is None else self._open.get(client, 0)
