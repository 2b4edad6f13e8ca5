"""Connection and concurrency limits that hold against a hostile kiosk network.

uvicorn alone has two gaps (found by tests/reliability/test_abuse.py):
- it never times out a connection that has not finished its first request's headers, so
  slowloris-style clients can hold sockets forever;
- its ``limit_concurrency`` counts *connections*, idle ones included, so a few hundred idle
  sockets make every other kiosk get a plain-text 503.
So the gateway closes connections whose headers do not arrive within ``header_timeout_s``
(``GuardedHttpToolsProtocol``) and limits *requests in flight* in the app itself, answering an
OpenAI-style 503 with ``Retry-After`` past the limit (``InFlightLimit``).
"""

from __future__ import annotations

import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def guarded_protocol(header_timeout_s: float) -> type[HttpToolsProtocol]:
    """An httptools protocol class that closes connections stuck before their headers end."""

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        HEADER_TIMEOUT_S = header_timeout_s

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(self.HEADER_TIMEOUT_S, self._header_timeout)

        def _disarm(self) -> None:
            timer = getattr(self, "_header_timer", None)
            if timer is not None:
                timer.cancel()
                self._header_timer = None

        def _header_timeout(self) -> None:
            self._header_timer = None
            if self.cycle is None or self.cycle.response_complete:
                self.transport.close()

    return GuardedHttpToolsProtocol


_BUSY = json.dumps({"error": {
    "message": "The gateway is handling too many requests; retry shortly.",
    "type": "server_error", "param": None, "code": "server_busy",
}}).encode()


class InFlightLimit:
    """ASGI middleware: at most ``limit`` HTTP requests in flight; past it, a 503 at once."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"application/json"), (b"retry-after", b"1"),
                (b"content-length", str(len(_BUSY)).encode())]})
            await send({"type": "http.response.body", "body": _BUSY})
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
