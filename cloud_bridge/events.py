"""What a cloud call yields: text and tool-call deltas, then one StreamDone (shared by the client and reader)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cloud_bridge.timings import CallTimings


@dataclass(slots=True)
class ContentDelta:
    """One piece of assistant text, passed on to the kiosk as it arrives."""

    text: str


@dataclass(slots=True)
class ToolCallDelta:
    """One piece of a tool call, as the upstream sent it (OpenAI's ``delta.tool_calls[i]``).

    The first piece of a call carries its ``id`` and ``name``; later pieces carry only argument
    fragments. They are passed on as they arrive, never re-assembled here: the kiosk's SDK
    assembles them, and a stream cut half-way is an error, not a shorter call.
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    type: str | None = None


@dataclass(slots=True)
class StreamDone:
    """The last item of a successful stream: how it ended and what it cost."""

    finish_reason: str
    usage: dict[str, Any] | None
    provider: str
    model: str
    upstream_request_id: str | None
    timings: CallTimings
