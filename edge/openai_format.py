"""OpenAI wire format: the ``chat.completion`` object and ``chat.completion.chunk`` SSE lines.

Chunks are built from a pre-rendered prefix and suffix around the JSON-escaped text, so each
token costs one ``json.dumps`` of a short string and one concatenation: the per-token Python work
on the device stays far below the model's own time per token.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .errors import APIError
from .types import Finish, ToolCallDelta

DONE = b"data: [DONE]\n\n"


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class ChunkWriter:
    """Renders one stream's SSE events."""

    def __init__(self, completion_id: str, model: str, created: int | None = None) -> None:
        self.id = completion_id
        self.model = model
        self.created = created or int(time.time())
        head = _dumps({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": model})
        self._head = head[:-1]  # without the closing brace
        self._content_prefix = ("data: " + self._head + ',"choices":[{"index":0,"delta":{"content":').encode()
        self._content_suffix = b'},"logprobs":null,"finish_reason":null}]}\n\n'

    def role(self) -> bytes:
        return self._event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                          "logprobs": None, "finish_reason": None}]})

    def content(self, text: str) -> bytes:
        return self._content_prefix + _dumps(text).encode() + self._content_suffix

    def tool_call(self, delta: ToolCallDelta) -> bytes:
        """A ``delta.tool_calls`` chunk as OpenAI sends it: id, type and name on a call's first piece."""
        call: dict[str, Any] = {"index": delta.index}
        function: dict[str, Any] = {"arguments": delta.arguments}
        if delta.id is not None:
            call["id"] = delta.id
            call["type"] = "function"
        if delta.name is not None:
            function = {"name": delta.name, "arguments": delta.arguments}
        call["function"] = function
        return self._event({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "logprobs": None,
                                          "finish_reason": None}]})

    def finish(self, reason: str, timings: dict[str, Any] | None = None) -> bytes:
        body: dict[str, Any] = {"choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason}]}
        if timings:
            body["timings"] = timings
        return self._event(body)

    def usage(self, finish: Finish, timings: dict[str, Any] | None = None) -> bytes:
        body: dict[str, Any] = {"choices": [], "usage": finish.usage.as_dict()}
        if timings:
            body["timings"] = timings
        return self._event(body)

    @staticmethod
    def error(exc: APIError) -> bytes:
        return ("data: " + _dumps(exc.body()) + "\n\n").encode()

    def _event(self, fields: dict[str, Any]) -> bytes:
        return ("data: " + self._head + "," + _dumps(fields)[1:] + "\n\n").encode()


def assemble_tool_calls(deltas: list[ToolCallDelta]) -> list[dict[str, Any]]:
    """Streamed tool-call pieces joined into whole calls, in index order (``message.tool_calls``)."""
    calls: dict[int, dict[str, Any]] = {}
    for d in deltas:
        call = calls.setdefault(d.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
        if d.id:
            call["id"] = d.id
        if d.name:
            call["function"]["name"] += d.name
        call["function"]["arguments"] += d.arguments
    return [calls[i] for i in sorted(calls)]


def completion_body(
    completion_id: str, model: str, text: str, finish: Finish, timings: dict[str, Any] | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
        if not text:
            message["content"] = None
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish.finish_reason,
            }
        ],
        "usage": finish.usage.as_dict(),
    }
    if timings:
        body["timings"] = timings
    return body
