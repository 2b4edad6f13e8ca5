"""Hedging: the cloud first, the edge too if the cloud is slow to its first token; first one wins.

A borderline request the router sends to the cloud with ``hedge`` set starts on the cloud; when no
first event arrived within ``hedge_delay_s`` the edge starts as well. The first backend with a
first event answers, the other is cancelled (its stream closed, so the device or the connection is
freed). If the cloud fails before its first token, the edge answers (a fall-back, marked degraded);
if both fail, the cloud's error is the one reported (the route the policy chose).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable

from .answer import Events, Started
from .errors import APIError
from .router import Decision
from .types import Finish, TextDelta, Timer, ToolCallDelta

First = tuple[TextDelta | ToolCallDelta | Finish, Events]
Starter = Callable[[], Awaitable[First]]


async def hedged(cloud: Starter, edge: Starter, d: Decision, timer: Timer) -> Started:
    """Race the cloud against a delayed edge; the winner's stream, with how it won."""
    tasks: dict[str, asyncio.Task[First]] = {"cloud": asyncio.create_task(_call(cloud))}
    done, _ = await asyncio.wait(tasks.values(), timeout=d.hedge_delay_s or 0.0)
    if not done:
        tasks["edge"] = asyncio.create_task(_call(edge))
    errors: dict[str, APIError] = {}
    try:
        while tasks:
            done, _ = await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_COMPLETED)
            for name, task in list(tasks.items()):
                if task not in done:
                    continue
                del tasks[name]
                exc = task.exception()
                if exc is None:
                    first, rest = task.result()
                    timer.mark("ttft")
                    raced = len(tasks) > 0 or (name == "edge" and "cloud" not in errors)
                    for loser in tasks.values():
                        loser.cancel()
                    await drain_losers(tasks.values())
                    tasks.clear()
                    if "cloud" in errors:
                        d.degraded = d.degraded or "cloud-unavailable"
                        why = errors["cloud"].code or "error"
                        return Started(name, f"fallback:cloud-{why}", first, rest, raced, True)
                    if name == "edge":
                        return Started(name, "hedge:edge-won", first, rest, True, False)
                    return Started(name, "hedge:cloud-won" if raced else d.reason, first, rest, raced, False)
                if not isinstance(exc, APIError):
                    raise exc
                errors[name] = exc
                if name == "cloud" and "edge" not in tasks and "edge" not in errors and d.edge_ok:
                    # The cloud failed before its first token: the edge answers (fall-back).
                    tasks["edge"] = asyncio.create_task(_call(edge))
        # Both failed: report the cloud's error (the route the policy chose).
        raise errors.get("cloud") or next(iter(errors.values()))
    finally:
        for task in tasks.values():
            task.cancel()
        await drain_losers(tasks.values())


async def _call(start: Starter) -> First:
    return await start()


async def drain_losers(tasks: Iterable[asyncio.Task[First]]) -> None:
    """Wait for cancelled hedge losers, closing any stream one of them had already opened."""
    pending = list(tasks)
    if not pending:
        return
    await asyncio.wait(pending)
    for task in pending:
        if task.cancelled() or task.exception() is not None:
            continue
        _first, rest = task.result()
        with contextlib.suppress(Exception):
            await rest.aclose()


__all__ = ["drain_losers", "hedged"]
