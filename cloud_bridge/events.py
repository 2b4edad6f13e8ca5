"""What a cloud call yields: text deltas, then one StreamDone (shared by the client and reader)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cloud_bridge.timings import CallTimings


@dataclass(slots=True)
class ContentDelta:
    """One piece of assistant text, passed on to the kiosk as it arrives."""

    text: str


@dataclass(slots=True)
class StreamDone:
    """The last item of a successful stream: how it ended and what it cost."""

    finish_reason: str
    usage: dict[str, Any] | None
    provider: str
    model: str
    upstream_request_id: str | None
    timings: CallTimings
