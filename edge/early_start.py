"""Backends started before the router's final decision, while the encoder decides (``Pipeline._start``).

Why: the intent classifier's second stage (``models/encoder``) scores the requests its n-gram stage is unsure
of, and takes milliseconds (about 0.25 ms a token on two cores). A request that waited for it before any
backend was called would carry those milliseconds into its time to first token and into the decision's P99.
So the backends are called as soon as the n-gram stage has decided, the encoder runs beside them in a worker
thread, and the final decision picks among what is already running.

The rules this module keeps:

- An early start holds at most the backend's first event (a ``First``); nothing of it reaches the kiosk
  unless the final decision's backend takes it (``take``). So a device answer never goes out for a request
  the final decision calls complex.
- Every early start the final decision does not take is cancelled, and a stream that already had its first
  event is closed, which frees a local slot or resets a cloud stream (``drop_unused``). Whoever holds an
  ``EarlyStarts`` calls ``drop_unused`` once the answer has started or failed, on every path.
- The event loop holds tasks only weakly: the tasks being dropped stay in ``closing`` (a set the pipeline
  owns for the app's lifetime) until they have settled.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from .hedging import First


class EarlyStarts:
    """The backends one request started early, by name ("edge", "cloud")."""

    def __init__(self, closing: set[asyncio.Future], started_ms: float) -> None:
        self._tasks: dict[str, asyncio.Task[First]] = {}
        self._closing = closing
        self.started_ms = started_ms  # when they were called, in the request's timer
        self.taken: set[str] = set()

    @property
    def names(self) -> list[str]:
        return [*self._tasks, *self.taken]

    def start(self, name: str, call: Callable[[], Awaitable[First]]) -> None:
        self._tasks[name] = asyncio.ensure_future(call())

    @property
    def unused(self) -> list[str]:
        """The early starts not taken (yet): what ``drop_unused`` will drop."""
        return list(self._tasks)

    def take(self, name: str) -> asyncio.Task[First] | None:
        """The early start of ``name`` for the answer to use (it owns the stream from now), or None."""
        task = self._tasks.pop(name, None)
        if task is not None:
            self.taken.add(name)
        return task

    def drop_unused(self) -> None:
        """Cancel what was not taken; close the stream of one that already had its first event."""
        for task in self._tasks.values():
            drop(task, self._closing)
        self._tasks.clear()


def drop(task: asyncio.Task[First], closing: set[asyncio.Future]) -> None:
    """Cancel ``task``; once it has settled, close the stream it opened, if it got that far."""
    task.cancel()
    closing.add(task)

    def settled(done: asyncio.Future) -> None:
        closing.discard(done)
        if done.cancelled():
            return
        if done.exception() is not None:  # a failed early start: nothing is open, nothing to report
            return
        _first, rest = done.result()
        closer = asyncio.ensure_future(_close(rest))
        closing.add(closer)
        closer.add_done_callback(closing.discard)

    task.add_done_callback(settled)


async def _close(rest: object) -> None:
    with contextlib.suppress(Exception):
        await rest.aclose()  # type: ignore[attr-defined]


__all__ = ["EarlyStarts", "drop"]
