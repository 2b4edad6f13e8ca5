"""The gateway's internal request and event types, free of any web framework.

The app turns an HTTP body into a ``ChatRequest``; the router decides on it; a backend turns it
into a stream of ``TextDelta`` events closed by one ``Finish``. Caches, metrics and the benchmark
all see these same objects, so each part can be tested without HTTP.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Message:
    role: str
    content: str


@dataclass(slots=True)
class ChatRequest:
    messages: list[Message]
    model: str = "edgecloud-auto"  # the name the kiosk sent
    route_name: str = "edgecloud-auto"  # after alias resolution: edgecloud-auto|edge|cloud
    max_tokens: int | None = None
    temperature: float = 0.7
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False
    user: str | None = None
    request_id: str = ""
    # Features the edge cannot serve; set by validation, read by the router's hard rules.
    has_tools: bool = False
    has_images: bool = False
    has_schema: bool = False
    # Request headers that steer the gateway (lower-cased names).
    route_header: str | None = None
    scenario_header: str | None = None
    cache_control: str | None = None
    cache_header: str | None = None
    cache_admin: bool = False  # the request showed the admin token (may refresh shared cache entries)
    extra: dict[str, Any] = field(default_factory=dict)
    received_at: float = field(default_factory=time.perf_counter)

    @property
    def last_user_message(self) -> str:
        for message in reversed(self.messages):
            if message.role == "user":
                return message.content
        return ""

    @property
    def system_prompt(self) -> str:
        return "\n".join(m.content for m in self.messages if m.role in ("system", "developer"))

    @property
    def is_multi_turn(self) -> bool:
        users = sum(1 for m in self.messages if m.role == "user")
        return users > 1 or any(m.role == "assistant" for m in self.messages)


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(slots=True)
class Finish:
    finish_reason: str = "stop"
    usage: Usage = field(default_factory=Usage)
    # Backend-measured phases in milliseconds (queue, prefill, decode ...).
    timings: dict[str, float] = field(default_factory=dict)
    model: str = ""



@dataclass
class Timer:
    """Phase timings for Server-Timing and metrics, relative to the request's arrival."""

    start: float = field(default_factory=time.perf_counter)
    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, name: str, ms: float | None = None) -> float:
        value = (time.perf_counter() - self.start) * 1000.0 if ms is None else ms
        self.marks[name] = value
        return value

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.start) * 1000.0

    def server_timing(self) -> str:
        return ", ".join(f"{name};dur={value:.1f}" for name, value in self.marks.items())
