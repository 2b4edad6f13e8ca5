"""What the pipeline hands the HTTP layer: an ``Answer``, a ``Preview``, or ``Refused``.

An ``Answer`` holds the first event of a backend's stream (the pipeline only returns once it
exists) and the rest of that stream. Iterating ``events()`` records what the text was, which tool
calls were made and how the answer ended; when it ends, the answer *settles*: the pipeline's
callback fills the request's record, stores a safe answer in the cache and hands the record to the
observers. A non-streamed answer is held unsettled while it runs (``hold``), because the pipeline
may still restart it on the other backend and the request should be recorded once, as it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .errors import APIError, internal
from .records import RequestRecord
from .router import Decision, Refusal
from .types import ChatRequest, Finish, TextDelta, Timer, ToolCallDelta

if TYPE_CHECKING:
    from .cache import CacheHit

log = logging.getLogger("edgecloud.pipeline")

Events = AsyncIterator[TextDelta | ToolCallDelta | Finish]
Settle = Callable[["Answer", str, "Finish | None", "APIError | None"], None]


@dataclass
class Started:
    """A backend's stream with its first event in hand, and how it came to be the one answering."""

    route: str  # "edge" | "cloud"
    reason: str
    first: TextDelta | ToolCallDelta | Finish
    rest: Events
    hedged: bool = False  # both backends were started for it
    fallback: bool = False  # the other backend failed first


@dataclass
class Answer:
    """A started answer: its first event is in hand, the rest is ``events``."""

    request: ChatRequest
    route: str
    reason: str
    model: str
    timer: Timer
    record: RequestRecord
    first: TextDelta | ToolCallDelta | Finish
    rest: Events
    degraded: str | None = None
    cache: str | None = None
    decision: Decision | None = None
    backend_request: ChatRequest | None = None  # what the backend saw (grounded); ``request`` keys the cache
    finish: Finish | None = None  # how it ended, once it did
    tool_calls: list[ToolCallDelta] = field(default_factory=list)
    hold: bool = False  # settle only when ``settle()`` is called (the pipeline may still restart it)
    _settle: Settle | None = None
    _text: list[str] = field(default_factory=list)
    _ended: tuple[str, Finish | None, APIError | None] = ("cancelled", None, None)
    _settled: bool = False

    async def events(self) -> Events:
        """Every event of the answer, first included; settles the answer when it ends."""
        finish: Finish | None = None
        error: APIError | None = None
        outcome = "cancelled"
        try:
            event = self.first
            while True:
                if isinstance(event, TextDelta):
                    self._text.append(event.text)
                    yield event
                elif isinstance(event, ToolCallDelta):
                    self.tool_calls.append(event)
                    yield event
                else:
                    finish = self.finish = event
                    outcome = "ok"
                    yield event
                    return
                event = await self.rest.__anext__()
        except StopAsyncIteration:
            outcome = "error"
            error = internal("The backend ended the answer without finishing it.")
            raise error from None
        except APIError as exc:
            outcome, error = "error", exc
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception as exc:
            outcome, error = "error", internal(f"The backend failed mid-answer: {type(exc).__name__}")
            log.exception("backend failed mid-answer")
            raise error from exc
        finally:
            with contextlib.suppress(Exception):
                await self.rest.aclose()
            self._ended = (outcome, finish, error)
            if not self.hold:
                self.settle()

    async def run_to_end(self) -> APIError | None:
        """Consume every event (a non-streamed answer); the error that cut it, or None."""
        try:
            async for _event in self.events():
                pass
        except APIError as exc:
            return exc
        return None

    def settle(self, outcome: str | None = None, error: APIError | None = None) -> None:
        """Record how the answer ended (once): as it ended, or as ``outcome`` and ``error`` say."""
        if self._settled or self._settle is None:
            return
        self._settled = True
        ended, finish, ended_error = self._ended
        if outcome is None:
            outcome, error = ended, ended_error
        self._settle(self, outcome, finish, error)

    @property
    def text(self) -> str:
        return "".join(self._text)

    def final(self) -> Finish:
        """The ``Finish`` of a completed answer (``Pipeline.complete`` ends every answer with one)."""
        if self.finish is None:
            raise internal("The backend ended without finishing.")
        return self.finish


class Refused(Exception):
    """The router refused the request: no backend may answer it. The HTTP layer gives
    ``refusal.kind`` its status and reports the request with ``Pipeline.count_refused``."""

    def __init__(self, refusal: Refusal, record: RequestRecord, timer: Timer) -> None:
        super().__init__(refusal.message)
        self.refusal, self.record, self.timer = refusal, record, timer


@dataclass
class CachePreview:
    read: bool
    write: bool
    reason: str  # the policy's reason ("ok", "no-store", ...)
    hit: CacheHit | None = None
    disclosed: bool = False  # whether ``hit`` is told at all (only to a caller allowed to know)


@dataclass
class Preview:
    """Where a request would go, without generating: the decision and what the cache holds."""

    decision: Decision
    decision_ms: float
    cache: CachePreview | None = None


def cache_reason(hit: CacheHit) -> str:
    return "faq" if hit.reason == "faq" else f"cache:{hit.reason}"


__all__ = ["Answer", "CachePreview", "Events", "Preview", "Refused", "Started", "cache_reason"]
