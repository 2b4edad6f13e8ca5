"""A cheap, re-armable timeout for the reads of one upstream attempt.

Why not ``asyncio.timeout`` / ``anyio.move_on_after`` around every read: the first is 3.11+ only,
and a cancel scope per SSE chunk costs tens of microseconds (measured ~65 us on the kiosk-class
CPU), i.e. milliseconds per answer, against a budget of < 1 ms for the whole bridge. Here one
timer per attempt is re-armed lazily: moving the deadline (every token moves the gap deadline)
is a float store, and the timer only fires about once per deadline period.

When the deadline passes while the task is waiting on the upstream, the watchdog cancels the
task (exactly what a cancel scope does) and :meth:`Watchdog.wait` turns that cancellation into
:class:`DeadlineExceeded`. A cancellation that comes from elsewhere (the kiosk went away) is
passed through untouched.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class DeadlineExceeded(Exception):
    """The deadline set with :meth:`Watchdog.set` passed; ``kind`` says which one."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class Watchdog:
    """Deadlines in ``time.perf_counter()`` seconds for awaits made by ONE task."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._deadline = math.inf
        self._kind = ""
        self._armed_at = math.inf
        self._handle: asyncio.TimerHandle | None = None
        self._waiting = False
        self._fired: str | None = None

    def set(self, deadline: float, kind: str) -> None:
        """Move the deadline; arming a timer only when it must fire earlier than the armed one."""
        self._deadline = deadline
        self._kind = kind
        if deadline < self._armed_at:
            self._arm(deadline)

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_at = when
        delay = max(0.0, when - time.perf_counter())
        self._handle = self._loop.call_at(self._loop.time() + delay, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._armed_at = math.inf
        if time.perf_counter() < self._deadline:
            self._arm(self._deadline)  # the deadline moved later since the timer was armed
            return
        if self._waiting and self._fired is None and self._task is not None:
            self._fired = self._kind
            self._task.cancel()
        # Not waiting: the caller holds the stream; the next wait() sees the deadline has passed.

    async def wait(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` under the current deadline; raise DeadlineExceeded when it passes."""
        if time.perf_counter() >= self._deadline:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise DeadlineExceeded(self._kind)
        self._task = asyncio.current_task()  # a stream may be consumed from another task later
        self._waiting = True
        try:
            result = await awaitable
        except asyncio.CancelledError:
            if self._fired is None:
                raise
            kind, self._fired = self._fired, None
            if self._other_cancel_pending():
                raise
            raise DeadlineExceeded(kind) from None
        finally:
            self._waiting = False
        if self._fired is not None:
            # The timer fired as the await completed: a cancel is pending on the task. Absorb
            # it here instead of letting it land in unrelated code later.
            kind, self._fired = self._fired, None
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                if self._other_cancel_pending():
                    raise
            raise DeadlineExceeded(kind)
        return result

    def _other_cancel_pending(self) -> bool:
        """On 3.11+, whether someone besides us also cancelled the task (then let it propagate)."""
        if sys.version_info >= (3, 11) and self._task is not None:
            return self._task.uncancel() > 0
        return False

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._armed_at = math.inf
