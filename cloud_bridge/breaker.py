"""Per-provider circuit breaker: stop sending to an upstream that is failing, probe it, come back.

Opens on ``consecutive`` failures in a row or when the error rate over a sliding window (with a
minimum number of calls) is above ``error_rate``. After ``open_s`` it lets ONE probe through
(half-open); the probe's success closes it, its failure opens it again.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class CircuitBreaker:
    def __init__(
        self,
        *,
        consecutive: int = 5,
        error_rate: float = 0.5,
        window_s: float = 30.0,
        min_calls: int = 10,
        open_s: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.consecutive = consecutive
        self.error_rate = error_rate
        self.window_s = window_s
        self.min_calls = min_calls
        self.open_s = open_s
        self._clock = clock
        self._state = CLOSED
        self._failures_in_row = 0
        self._opened_at = 0.0
        self._probe_in_flight = False
        self._window: deque[tuple[float, bool]] = deque()

    @property
    def state(self) -> str:
        if self._state == OPEN and self._clock() - self._opened_at >= self.open_s:
            return HALF_OPEN
        return self._state

    def would_allow(self) -> bool:
        """Whether a call could go now, without reserving the half-open probe slot."""
        state = self.state
        return state == CLOSED or (state == HALF_OPEN and not self._probe_in_flight)

    def allow(self) -> bool:
        """Reserve permission for one call; in half-open only one probe is in flight at a time."""
        state = self.state
        if state == CLOSED:
            return True
        if state == HALF_OPEN and not self._probe_in_flight:
            self._state = HALF_OPEN
            self._probe_in_flight = True
            return True
        return False

    def release(self) -> None:
        """The call ended without a verdict (cancelled by the caller): free the probe slot."""
        self._probe_in_flight = False

    def record_success(self) -> None:
        self._probe_in_flight = False
        self._failures_in_row = 0
        self._push(ok=True)
        if self._state != CLOSED:
            self._state = CLOSED
            self._window.clear()

    def record_failure(self) -> None:
        self._probe_in_flight = False
        self._failures_in_row += 1
        self._push(ok=False)
        if self._state == HALF_OPEN or self._failures_in_row >= self.consecutive or self._rate_exceeded():
            self._trip()

    def _trip(self) -> None:
        self._state = OPEN
        self._opened_at = self._clock()

    def _push(self, ok: bool) -> None:
        now = self._clock()
        self._window.append((now, ok))
        while self._window and now - self._window[0][0] > self.window_s:
            self._window.popleft()

    def _rate_exceeded(self) -> bool:
        if len(self._window) < self.min_calls:
            return False
        failed = sum(1 for _, ok in self._window if not ok)
        return failed / len(self._window) > self.error_rate
