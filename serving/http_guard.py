"""uvicorn's httptools protocol with limits on the request head (`serving.limits`).

Per connection, this subclass of uvicorn's `HttpToolsProtocol`
(uvicorn/protocols/http/httptools_impl.py) feeds the parser at most `max_header_bytes`
of a request's head and `max_headers` fields (431 past either, then close), and gives a
head `header_timeout` seconds (408, then close). Bodies are the app's
(`serving.endpoints`). Why: docs/inside-serving.md.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
from typing import Any

# The parser under uvicorn's protocol: a dependency of ours (pyproject), named here so a
# missing wheel fails at import, naming it, rather than inside uvicorn.
import httptools  # noqa: F401
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from serving.limits import HttpLimits

log = logging.getLogger("serving.server")

#: After a refusal, what the client still sends is read and dropped until it has been
#: silent this many seconds, or for at most `LINGER_MAX_SECONDS` (nginx's
#: `lingering_timeout` and `lingering_time`, 5 s and 30 s there).
LINGER_SECONDS = 2.0
LINGER_MAX_SECONDS = 30.0


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """`HttpToolsProtocol` refusing heads that are too large, too many or too slow."""

    limits: HttpLimits = HttpLimits()  # the subclass `guarded_protocol` makes sets its own

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_open = True  # the next bytes belong to a request's head
        self._head_bytes = 0
        self._header_fields = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._lingering = False  # refused: what still arrives is read and dropped
        self._linger_timer: asyncio.TimerHandle | None = None

    # ---- the connection ------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._linger_on()
            return
        while data and not self.transport.is_closing() and not self._lingering:
            if self._head_open:
                if self._head_timer is None:  # the first byte of a new request's head
                    self._arm_head_timer()
                room = self.limits.max_header_bytes - self._head_bytes
                piece, data = data[:room], data[room:]
                self._head_bytes += len(piece)
            else:
                piece, data = data, b""
            super().data_received(piece)
            if (self._head_open and self._head_bytes >= self.limits.max_header_bytes
                    and not self.transport.is_closing() and not self._lingering):
                self._refuse(431, f"request line and headers exceed "
                                  f"{self.limits.max_header_bytes} bytes")
                return

    # ---- parser callbacks ------------------------------------------------------------

    # Once refused, the parser may still be fed the rest of the read it was refused in:
    # nothing of it reaches the app.

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._lingering:
            return
        self._header_fields += 1
        if self._header_fields > self.limits.max_headers:
            self._refuse(431, f"more than {self.limits.max_headers} header fields")
            return
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._lingering:
            return
        self._head_open = False
        self._cancel_head_timer()
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._lingering:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._lingering:
            return
        super().on_message_complete()
        # The next bytes on this connection start the next request's head.
        self._head_open = True
        self._head_bytes = 0
        self._header_fields = 0

    # ---- the head's timer and the refusal ---------------------------------------------

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.limits.header_timeout, self._head_late)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if not self._head_open or self.transport.is_closing():
            return
        if self._head_bytes == 0:  # nothing sent: closed without an answer nobody asked for
            self.transport.close()
            return
        self._refuse(408, f"request headers not received within "
                          f"{self.limits.header_timeout:g} s")

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` with an OIP error body and close the connection (or only
        close it, when an earlier request's answer is still being made on it).

        The close lingers (as nginx's `lingering_close`): the answer is sent and our
        side of the connection shut, then what the client still sends (the rest of its
        headers, its body) is read and dropped until it stops (`LINGER_SECONDS`,
        `LINGER_MAX_SECONDS`). Closing at once, with its bytes unread, makes the
        kernel reset the connection, and the client loses the answer it was sent."""
        self._cancel_head_timer()
        self._lingering = True
        log.debug("refused a request from %s: %d %s", self.client, status, message)
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()
            return
        body = json.dumps({"error": message}).encode()
        phrase = http.HTTPStatus(status).phrase
        head = [f"HTTP/1.1 {status} {phrase}\r\n".encode()]
        head += [name + b": " + value + b"\r\n" for name, value in
                 self.server_state.default_headers]
        head.append(b"content-type: application/json\r\ncontent-length: %d\r\n"
                    b"connection: close\r\n\r\n" % len(body))
        self.transport.write(b"".join(head) + body)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.flow.resume_reading()
        self.loop.call_later(LINGER_MAX_SECONDS, self.transport.close)
        self._linger_on()

    def _linger_on(self) -> None:
        """The client sent more while lingering: close after `LINGER_SECONDS` more."""
        if self._linger_timer is not None:
            self._linger_timer.cancel()
        self._linger_timer = self.loop.call_later(LINGER_SECONDS, self.transport.close)


def guarded_protocol(limits: HttpLimits) -> type[GuardedHttpToolsProtocol]:
    """The protocol class to hand uvicorn (`Config(http=...)`), with these limits."""
    return type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), {"limits": limits})
