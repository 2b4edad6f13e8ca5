"""Connection and concurrency limits that hold against a hostile kiosk network.

uvicorn alone has two gaps (found by tests/reliability/test_abuse.py):
- it never times out a connection that has not finished its first request's headers, so
  slowloris-style clients can hold sockets forever;
- its ``limit_concurrency`` counts *connections*, idle ones included, so a few hundred idle
  sockets make every other kiosk get a plain-text 503.
So the gateway closes connections whose headers do not arrive within ``header_timeout_s``
(``guarded_protocol``, kept in ``edge.uvicorn_private`` with the uvicorn internals it relies on)
and limits *requests in flight* in the app itself, answering an OpenAI-style 503 with
``Retry-After`` past the limit (``InFlightLimit``). A request counts as in flight only once its
body has arrived (``BodyFirst``), so slow senders cannot take the slots.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Any

from .uvicorn_private import guarded_protocol

__all__ = ["BodyFirst", "InFlightLimit", "guarded_protocol"]


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


_SLOW_BODY = json.dumps({"error": {
    "message": "The request body arrived too slowly.",
    "type": "invalid_request_error", "param": None, "code": "request_timeout",
}}).encode()


def _has_body(scope: dict[str, Any]) -> tuple[bool, int | None]:
    """(whether the request carries a body, its declared length if any)."""
    length: int | None = None
    chunked = False
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return True, None  # the app answers the bad header
        elif name == b"transfer-encoding":
            chunked = True
    return chunked or bool(length), length


async def _respond(send: Any, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


class BodyFirst:
    """ASGI middleware: receive a request's whole body *before* ``InFlightLimit`` counts it.

    A client that trickles its body in for the time the gateway allows (``[server] body_timeout_s``,
    15 s) used to hold an in-flight slot all that time, so a few hundred slow senders locked every
    kiosk out. Bodies now arrive without a slot and with no count limit; what bounds them is time
    (``timeout_s``, then 408) and memory: every connection may hold ``free_bytes`` (what uvicorn's own
    flow control buffers anyway), and the bytes of arriving bodies beyond that share ``budget_bytes``
    (past it: 503, retry). A body larger than ``max_bytes`` is handed on as it is, and the app answers
    413 as it reads.
    """

    def __init__(self, app: Any, max_bytes: int, timeout_s: float = 15.0, free_bytes: int = 64 * 1024,
                 budget_bytes: int = 64 * 1024 * 1024) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.free_bytes = free_bytes
        self.budget_bytes = budget_bytes
        self.charged = 0  # bytes beyond free_bytes held by bodies still arriving

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        has_body, declared = _has_body(scope) if scope["type"] == "http" else (False, None)
        if not has_body or (declared is not None and declared > self.max_bytes):
            await self.app(scope, receive, send)
            return
        messages: list[dict[str, Any]] = []
        charge = 0

        async def collect() -> bool:
            """True when the body is complete (or cut off by a disconnect); False: over budget."""
            nonlocal charge
            size = 0
            while True:
                message = await receive()
                messages.append(message)
                if message["type"] != "http.request" or not message.get("more_body", False):
                    return True
                size += len(message.get("body", b""))
                over = max(0, size - self.free_bytes) - charge
                if over > 0:
                    if self.charged + over > self.budget_bytes:
                        return False
                    self.charged += over
                    charge += over
                if size > self.max_bytes:
                    return True  # hand on: the app counts on and answers 413

        try:
            complete = await asyncio.wait_for(collect(), self.timeout_s)
        except asyncio.TimeoutError:
            await _respond(send, 408, _SLOW_BODY)
            return
        finally:
            self.charged -= charge
        if not complete:
            await _respond(send, 503, _BUSY, [(b"retry-after", b"1")])
            return
        pending = deque(messages)

        async def replay() -> dict[str, Any]:
            return pending.popleft() if pending else await receive()

        await self.app(scope, replay, send)
