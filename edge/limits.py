"""Connection and concurrency limits that hold against a hostile kiosk network.

uvicorn alone has two gaps (found by tests/reliability/test_abuse.py):
- it never times out a connection that has not finished its first request's headers, so
  slowloris-style clients can hold sockets forever;
- its ``limit_concurrency`` counts *connections*, idle ones included, so a few hundred idle
  sockets make every other kiosk get a plain-text 503.
So the gateway closes connections whose headers do not arrive within ``header_timeout_s``
(``guarded_protocol``, kept in ``edge.uvicorn_private`` with the uvicorn internals it relies on)
and limits *requests in flight* in the app itself, answering an
OpenAI-style 503 with ``Retry-After`` past the limit (``InFlightLimit``).
"""

from __future__ import annotations

import json
from typing import Any

from .uvicorn_private import guarded_protocol

__all__ = ["InFlightLimit", "guarded_protocol"]


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
