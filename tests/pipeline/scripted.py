"""Scripted backends for the pipeline's unit tests: no model, no network, no timing.

Each fake follows a script: the texts it streams, an error before its first event or after some
deltas, and an optional gate (an ``asyncio.Event``) its first event waits for, so a test orders
a race by setting events instead of sleeping. Each records how often it was started and whether
its stream was closed (a cancelled hedge loser, a client that went away).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from edge.config import RouterConfig, Settings
from edge.errors import APIError
from edge.pipeline import Pipeline
from edge.records import RequestRecord
from edge.router import Router
from edge.schemas import parse_chat_request
from edge.types import ChatRequest, Finish, TextDelta, ToolCallDelta, Usage

SETTINGS = Settings()


def busy() -> APIError:
    return APIError(503, "The on-device model is busy; retry shortly.", "server_error", None, "edge_busy",
                    {"Retry-After": "2"})


def cloud_cut() -> APIError:
    return APIError(502, "The cloud stream broke.", "server_error", None, "cloud_bad_response")


@dataclass
class Scripted:
    """A generating backend that follows its script."""

    name: str
    texts: tuple[str, ...] = ("Level 2,", " next to the pharmacy.")
    fail_before: APIError | None = None  # raised before the first event
    fail_after: int | None = None  # raise ``error`` after this many deltas
    error: APIError | None = None
    gate: asyncio.Event | None = None  # the first event waits for this
    stall_after: int | None = None  # after this many deltas, wait for ``resume`` (set ``stalled`` first)
    resume: asyncio.Event = field(default_factory=asyncio.Event)
    stalled: asyncio.Event = field(default_factory=asyncio.Event)
    calls: int = 0
    closed: int = 0  # streams ended: finished, failed or cancelled
    started: asyncio.Event = field(default_factory=asyncio.Event)
    seen: list[ChatRequest] = field(default_factory=list)

    async def generate(self, req: ChatRequest) -> AsyncIterator[TextDelta | ToolCallDelta | Finish]:
        self.calls += 1
        self.seen.append(req)
        self.started.set()
        try:
            if self.gate is not None:
                await self.gate.wait()
            if self.fail_before is not None:
                raise self.fail_before
            for i, text in enumerate(self.texts):
                if self.fail_after is not None and i == self.fail_after:
                    raise self.error or cloud_cut()
                if self.stall_after is not None and i == self.stall_after:
                    self.stalled.set()
                    await self.resume.wait()
                yield TextDelta(text)
            yield Finish("stop", Usage(9, len(self.texts)), {}, f"{self.name}-model")
        finally:
            self.closed += 1


@dataclass
class ScriptedEdge(Scripted):
    """The on-device role: a script plus the live state the router reads."""

    name: str = "edge"
    ready: bool = True
    queue_full: bool = False
    n_ctx: int = 2048
    tools_state: str = "off"
    ttft_s: float = 0.2

    def expected_ttft_s(self) -> float:
        return self.ttft_s

    def count_prompt_tokens(self, req: ChatRequest) -> int:
        return 20

    def prompt_token_bound(self, req: ChatRequest) -> int:
        return 24


@dataclass
class ScriptedCloud(Scripted):
    """The cloud role: a script plus whether it is configured and reachable (breaker closed)."""

    name: str = "cloud"
    enabled: bool = True
    up: bool = True

    def available(self) -> bool:
        return self.up

    def ttft_p95_s(self) -> float | None:
        return 0.5


@dataclass
class Fixed:
    """An intent classifier that always says the same."""

    label: str = "simple"
    confidence: float = 0.99
    latency_ms: float = 0.01

    def classify(self, text: str) -> Fixed:
        return self


@dataclass
class Rig:
    pipeline: Pipeline
    edge: ScriptedEdge
    cloud: ScriptedCloud | None
    records: list[RequestRecord]


def rig(edge: ScriptedEdge | None = None, cloud: ScriptedCloud | None = None, *, label: str = "simple",
        confidence: float = 0.99, no_cloud: bool = False, cache: Any = None, **router: Any) -> Rig:
    """A pipeline over scripted backends and the real router with a fixed classifier."""
    edge = edge or ScriptedEdge()
    cloud = None if no_cloud else (cloud or ScriptedCloud())
    records: list[RequestRecord] = []
    pipeline = Pipeline(Router(RouterConfig(**router), Fixed(label, confidence)), edge, cloud, cache,
                        observe=records.append)
    return Rig(pipeline, edge, cloud, records)


def ask(*turns: str, stream: bool = False, headers: dict[str, str] | None = None, **body: Any) -> ChatRequest:
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
    return parse_chat_request({"messages": messages, "stream": stream, **body}, SETTINGS, headers or {})


async def settled() -> None:
    """One turn of the loop: the pipeline hands records to observers with ``call_soon``."""
    await asyncio.sleep(0)


async def drain(answer: Any) -> str:
    """Every event of a started answer; its text."""
    async for _event in answer.events():
        pass
    return answer.text
