"""The gateway's one use of uvicorn beyond its documented API, and what it assumes.

uvicorn never times out a connection that has not finished its first request's headers
(slowloris), and offers no hook to do so, so ``guarded_protocol`` subclasses its httptools
protocol and arms a timer around the header phase. uvicorn documents ``Config(http=...)`` as
accepting a protocol class but not the class's internals. The assumptions, each checked by
``check_assumptions`` (run by ``tests/gateway/test_private_apis.py``; the behaviour itself by
``tests/reliability/test_abuse.py``):

1. ``uvicorn.protocols.http.httptools_impl.HttpToolsProtocol`` exists and is an
   ``asyncio.Protocol`` whose constructor takes ``(config, server_state, app_state, _loop=None)``.
2. asyncio calls ``connection_made(transport)`` and ``connection_lost(exc)``; httptools calls
   ``on_message_begin()`` when a request starts and ``on_headers_complete()`` when its headers
   end, all on the instance (so overriding them and calling ``super()`` keeps uvicorn's work).
3. The instance has ``loop`` (the event loop) after construction, ``transport`` after
   ``connection_made``, and ``cycle``: None before the first request, then an object with a
   boolean ``response_complete``.

``pyproject.toml`` bounds uvicorn to the minor line these were checked on (0.x minors may change
internals); a new release is tried by running the test above.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HOOKS = ("connection_made", "connection_lost", "on_message_begin", "on_headers_complete")


class UvicornAssumptionError(RuntimeError):
    """uvicorn no longer behaves as ``edge.uvicorn_private`` assumes."""


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


def check_assumptions() -> None:
    """Raise ``UvicornAssumptionError`` unless every assumption in this module's docstring holds."""
    import uvicorn
    from uvicorn.server import ServerState

    def fail(number: int, detail: str) -> UvicornAssumptionError:
        return UvicornAssumptionError(
            f"uvicorn {uvicorn.__version__} breaks assumption {number} of edge.uvicorn_private: {detail}"
        )

    if not issubclass(HttpToolsProtocol, asyncio.Protocol):
        raise fail(1, "HttpToolsProtocol is not an asyncio.Protocol")
    params = list(inspect.signature(HttpToolsProtocol.__init__).parameters)[1:4]
    if params != ["config", "server_state", "app_state"]:
        raise fail(1, f"HttpToolsProtocol(...) takes {params}")
    for hook in HOOKS:
        if not callable(getattr(HttpToolsProtocol, hook, None)):
            raise fail(2, f"HttpToolsProtocol.{hook} is gone")

    async def app(scope: Any, receive: Any, send: Any) -> None:  # never called
        raise AssertionError

    loop = asyncio.new_event_loop()
    try:
        config = uvicorn.Config(app, http="httptools", log_level="critical")
        config.load()
        proto = guarded_protocol(1.0)(config, ServerState(), {}, loop)
        if getattr(proto, "loop", None) is not loop:
            raise fail(3, "the protocol has no 'loop' attribute")
        if not hasattr(proto, "cycle") or proto.cycle is not None:
            raise fail(3, "the protocol's 'cycle' is not None before the first request")
        transport = _FakeTransport()
        proto.connection_made(transport)
        if getattr(proto, "transport", None) is not transport:
            raise fail(3, "connection_made did not keep the transport")
        if getattr(proto, "_header_timer", None) is None:
            raise fail(2, "connection_made did not reach the override")
        proto.connection_lost(None)
    finally:
        loop.close()


class _FakeTransport(asyncio.Transport):
    """Just enough of a socket transport for ``connection_made`` (peer and local addresses)."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def write(self, data: Any) -> None:
        pass
