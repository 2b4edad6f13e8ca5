"""``POST /v1/responses``: the text subset of OpenAI's Responses API, over the same pipeline as chat.

A Responses body is translated into a chat completions body (input items to messages,
``instructions`` to a system message, function tools and ``text.format`` to their chat shapes) and
validated by the same code as chat, so cache policy, router, backends, metrics and headers are one
path. The answer's events are rendered back as a ``response`` object or as the typed SSE events
(``response.created`` ... ``response.completed``) that the official SDKs' stream helpers assemble.

The gateway keeps no responses: ``previous_response_id`` and ``store: true`` get a 400 that says so
(send the earlier turns in ``input``), and so does every field outside the subset, by name, instead
of being dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from .errors import APIError, internal, invalid
from .structured import parse_response_format
from .types import Finish, TextDelta, ToolCallDelta

log = logging.getLogger("edgecloud.responses")

SUPPORTED = frozenset({
    "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream", "tools",
    "tool_choice", "text", "parallel_tool_calls", "user", "metadata", "store", "previous_response_id",
    "stream_options",
})
# Known Responses fields the gateway does not serve (named in the 400 as unsupported, not unknown).
KNOWN_UNSUPPORTED = frozenset({
    "reasoning", "include", "truncation", "background", "conversation", "prompt", "service_tier",
    "top_logprobs", "max_tool_calls", "safety_identifier", "prompt_cache_key", "prompt_cache_retention",
    "context_management",
})


# The request body in the OpenAPI document (what clients and the fuzz tests read); the handler
# validates the body itself, field by field, so each error names the field.
RESPONSES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["input"],
    "properties": {
        "model": {"type": "string", "default": "edgecloud-auto"},
        "input": {"anyOf": [
            {"type": "string"},
            {"type": "array", "minItems": 1, "items": {"type": "object", "properties": {
                "type": {"type": "string", "enum": ["message", "function_call", "function_call_output"]},
                "role": {"type": "string", "enum": ["user", "system", "developer", "assistant"]},
                "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]}}}},
        ]},
        "instructions": {"type": "string"},
        "max_output_tokens": {"type": "integer", "minimum": 1},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "top_p": {"type": "number", "minimum": 0, "maximum": 1},
        "stream": {"type": "boolean"},
        "tools": {"type": "array", "items": {"type": "object", "required": ["type", "name"], "properties": {
            "type": {"type": "string", "enum": ["function"]}, "name": {"type": "string"},
            "description": {"type": "string"}, "parameters": {"type": "object"}, "strict": {"type": "boolean"}}}},
        "tool_choice": {"anyOf": [{"type": "string", "enum": ["none", "auto", "required"]}, {"type": "object"}]},
        "text": {"type": "object", "properties": {"format": {"type": "object"}}},
        "parallel_tool_calls": {"type": "boolean"},
        "user": {"type": "string"},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        "store": {"type": "boolean"},
    },
}


def _unsupported(param: str, why: str = "") -> APIError:
    return invalid(f"'{param}' is not supported by this gateway's Responses API{why}.", param, "unsupported_parameter")


def to_chat_body(body: Any) -> dict[str, Any]:
    """The chat completions body for a Responses body; 400 naming the Responses field when it is not
    in the supported subset."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_type")
    for name in body:
        if name in KNOWN_UNSUPPORTED:
            raise _unsupported(name)
        if name not in SUPPORTED:
            raise invalid(f"Unrecognized request argument supplied: {name}", name, "unknown_parameter")
    if body.get("previous_response_id") is not None:
        raise _unsupported("previous_response_id", ": the gateway keeps no responses; send the earlier turns in "
                           "'input'")
    if body.get("store") not in (None, False):
        raise _unsupported("store", ": the gateway keeps no responses; set store to false")
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or set(options) - {"include_obfuscation"}):
        raise _unsupported("stream_options", " beyond include_obfuscation (no obfuscation is added)")
    chat: dict[str, Any] = {"model": body.get("model", "edgecloud-auto"), "messages": _messages(body)}
    for src, dst in (("max_output_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p"),
                     ("stream", "stream"), ("user", "user"), ("parallel_tool_calls", "parallel_tool_calls")):
        if body.get(src) is not None:
            chat[dst] = body[src]
    if body.get("tools") is not None:
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    text = body.get("text")
    if text is not None:
        if not isinstance(text, dict):
            raise invalid("'text' must be an object.", "text", "invalid_type")
        for name in text:
            if name != "format":
                raise _unsupported(f"text.{name}")
        if text.get("format") is not None:
            fmt = text["format"]
            spec = parse_response_format(fmt, "text.format")  # validates with the Responses field names
            if spec.kind == "json_schema":
                chat["response_format"] = {"type": "json_schema", "json_schema": {
                    k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}}
            else:
                chat["response_format"] = {"type": spec.kind}
    metadata = body.get("metadata")
    if metadata is not None and (not isinstance(metadata, dict) or len(metadata) > 16 or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise invalid("'metadata' must be an object of at most 16 string values.", "metadata")
    return chat


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise invalid("'instructions' must be a string.", "instructions", "invalid_type")
        messages.append({"role": "system", "content": instructions})
    given = body.get("input")
    if given is None:
        raise invalid("'input' is required.", "input", "missing_required_parameter")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
        return messages
    if not isinstance(given, list) or not given:
        raise invalid("'input' must be a string or a non-empty list of input items.", "input", "invalid_type")
    for i, item in enumerate(given):
        at = f"input[{i}]"
        if not isinstance(item, dict):
            raise invalid(f"'{at}' must be an object.", at, "invalid_type")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise invalid(f"'{at}.role' must be user, system, developer or assistant; got {role!r}.", f"{at}.role")
            messages.append({"role": role, "content": _text(item.get("content"), f"{at}.content")})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments", "")}}
            if not all(isinstance(v, str) for v in (call["id"], item.get("name"), item.get("arguments", ""))):
                raise invalid(f"'{at}' needs string 'call_id', 'name' and 'arguments'.", at)
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str):
                raise invalid(f"'{at}.call_id' must be a string.", f"{at}.call_id")
            messages.append({"role": "tool", "tool_call_id": call_id,
                             "content": output if isinstance(output, str) else _text(output, f"{at}.output")})
        else:
            raise _unsupported(f"{at}.type", f" for {kind!r} items (text messages and function calls only)")
    return messages


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"'{where}' must be a string or a list of content parts.", where, "invalid_type")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            raise _unsupported(f"{where}[{j}].type", f" for {kind!r} parts (text only)")
    return "".join(texts)


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise invalid("'tools' must be a list.", "tools", "invalid_type")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise _unsupported(f"tools[{i}].type", f" for {kind!r} tools (function tools only)")
        function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, str):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        raise _unsupported("tool_choice.type", " for 'allowed_tools'")
    raise invalid("'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"name\": ...}.",
                  "tool_choice")


_PARAM_NAMES = {"messages": "input", "max_tokens": "max_output_tokens", "response_format": "text.format"}


def responses_param(exc: APIError) -> APIError:
    """A chat-validation error renamed to the Responses field it is about."""
    if exc.param:
        head, sep, rest = exc.param.partition(".")
        base = head.split("[")[0]
        if base in _PARAM_NAMES:
            exc.param = _PARAM_NAMES[base] + head[len(base):] + sep + rest
        exc.param = exc.param.replace(".function.", ".")
    return exc


# ----------------------------------------------------------------------------- rendering
class ResponseWriter:
    """Builds one response's object and its stream events (with their sequence numbers)."""

    def __init__(self, response_id: str, model: str, body: dict[str, Any]) -> None:
        self.id = response_id
        self.model = model
        self.body = body
        self.created_at = int(time.time())
        self.seq = 0
        self.text: list[str] = []
        self.message_id = f"msg_{uuid.uuid4().hex}"
        self.message_index: int | None = None
        self.calls: dict[int, dict[str, Any]] = {}  # tool index -> function_call item
        self.call_index: dict[int, int] = {}  # tool index -> output index
        self.items: list[dict[str, Any]] = []

    # ----- the response object
    def response(self, status: str, finish: Finish | None = None, error: APIError | None = None) -> dict[str, Any]:
        b = self.body
        fmt = (b.get("text") or {}).get("format") or {"type": "text"}
        out: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self.created_at, "status": status,
            "error": {"code": error.code or "server_error", "message": error.message} if error else None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": b.get("instructions"), "max_output_tokens": b.get("max_output_tokens"),
            "model": self.model, "output": self.items if status != "in_progress" else [],
            "parallel_tool_calls": b.get("parallel_tool_calls", True), "previous_response_id": None,
            "store": False, "temperature": b.get("temperature", 0.7), "top_p": b.get("top_p", 1.0),
            "text": {"format": fmt}, "tool_choice": b.get("tool_choice", "auto"), "tools": b.get("tools") or [],
            "truncation": "disabled", "user": b.get("user"), "metadata": b.get("metadata") or {}, "usage": None,
        }
        if finish is not None:
            u = finish.usage
            out["usage"] = {"input_tokens": u.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
                            "output_tokens": u.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                            "total_tokens": u.total_tokens}
        return out

    def event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()

    # ----- output items, as events (streaming) and into ``items`` (both)
    def on_text(self, text: str) -> list[bytes]:
        out = []
        if self.message_index is None:
            self.message_index = len(self.items)
            self.items.append({"type": "message", "id": self.message_id, "status": "in_progress", "role": "assistant",
                               "content": []})
            out.append(self.event("response.output_item.added", output_index=self.message_index,
                                  item=dict(self.items[self.message_index])))
            out.append(self.event("response.content_part.added", item_id=self.message_id,
                                  output_index=self.message_index, content_index=0,
                                  part={"type": "output_text", "text": "", "annotations": []}))
        self.text.append(text)
        out.append(self.event("response.output_text.delta", item_id=self.message_id, output_index=self.message_index,
                              content_index=0, delta=text, logprobs=[]))
        return out

    def on_call(self, d: ToolCallDelta) -> list[bytes]:
        out = []
        item = self.calls.get(d.index)
        if item is None:
            item = {"type": "function_call", "id": f"fc_{uuid.uuid4().hex}", "call_id": d.id or f"call_{d.index}",
                    "name": d.name or "", "arguments": "", "status": "in_progress"}
            self.calls[d.index] = item
            self.call_index[d.index] = len(self.items)
            self.items.append(item)
            out.append(self.event("response.output_item.added", output_index=self.call_index[d.index],
                                  item=dict(item)))
        elif d.name:
            item["name"] += d.name
        if d.arguments:
            item["arguments"] += d.arguments
            out.append(self.event("response.function_call_arguments.delta", item_id=item["id"],
                                  output_index=self.call_index[d.index], delta=d.arguments))
        return out

    def close_items(self) -> list[bytes]:
        out = []
        if self.message_index is not None:
            text = "".join(self.text)
            part = {"type": "output_text", "text": text, "annotations": []}
            i = self.message_index
            self.items[i].update(status="completed", content=[part])
            out.append(self.event("response.output_text.done", item_id=self.message_id, output_index=i,
                                  content_index=0, text=text, logprobs=[]))
            out.append(self.event("response.content_part.done", item_id=self.message_id, output_index=i,
                                  content_index=0, part=part))
            out.append(self.event("response.output_item.done", output_index=i, item=self.items[i]))
        for index, item in sorted(self.calls.items()):
            item["status"] = "completed"
            out.append(self.event("response.function_call_arguments.done", item_id=item["id"],
                                  output_index=self.call_index[index], name=item["name"],
                                  arguments=item["arguments"]))
            out.append(self.event("response.output_item.done", output_index=self.call_index[index], item=item))
        return out


def final_status(finish: Finish) -> str:
    return "incomplete" if finish.finish_reason == "length" else "completed"


async def stream_events(answer: Any, writer: ResponseWriter) -> AsyncIterator[bytes]:
    """The typed SSE events of a streamed response; a failure ends it with ``error`` and ``response.failed``."""
    yield writer.event("response.created", response=writer.response("in_progress"))
    yield writer.event("response.in_progress", response=writer.response("in_progress"))
    try:
        async for event in answer.events():
            if isinstance(event, TextDelta):
                for chunk in writer.on_text(event.text):
                    yield chunk
            elif isinstance(event, ToolCallDelta):
                for chunk in writer.on_call(event):
                    yield chunk
            else:
                for chunk in writer.close_items():
                    yield chunk
                status = final_status(event)
                yield writer.event(f"response.{status}", response=writer.response(status, event))
                return
        raise internal("The backend ended without finishing.")
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        error = exc if isinstance(exc, APIError) else internal("The stream failed.")
        if not isinstance(exc, APIError):
            log.exception("responses stream failed")
        yield writer.event("error", code=error.code, message=error.message, param=error.param)
        yield writer.event("response.failed", response=writer.response("failed", error=error))


def response_body(answer: Any, writer: ResponseWriter, finish: Finish) -> dict[str, Any]:
    """The whole ``response`` object of a finished, non-streamed answer."""
    if answer.text or not answer.tool_calls:
        writer.on_text(answer.text)
    for delta in answer.tool_calls:
        writer.on_call(delta)
    writer.close_items()
    return writer.response(final_status(finish), finish)


def mount_responses(app: Any, settings: Any) -> None:
    """Add ``POST /v1/responses`` to the app (the chat route's helpers do the HTTP work)."""
    from .app import _headers, answer_for, error_response, read_json_body, request_id_of
    from .schemas import parse_chat_request

    @app.post("/v1/responses", tags=["openai"], openapi_extra={"requestBody": {
        "required": True, "content": {"application/json": {"schema": RESPONSES_SCHEMA}}}})
    async def create_response(request: Request) -> Response:
        request_id = request_id_of(request)
        pipeline = request.app.state.services.pipeline
        try:
            body = await read_json_body(request, settings.server.max_body_bytes)
            chat = to_chat_body(body)
            try:
                req = parse_chat_request(chat, settings, request.headers)
            except APIError as exc:
                raise responses_param(exc) from None
        except APIError as exc:
            pipeline.count_rejected(request_id, exc)
            return error_response(exc, request_id)
        req.request_id = request_id
        try:
            answer = await answer_for(pipeline, req)  # whole when not streamed, with every fall-back
        except APIError as exc:
            return error_response(exc, request_id)
        writer = ResponseWriter(f"resp_{request_id}", req.model, body)
        if req.stream:
            return StreamingResponse(stream_events(answer, writer), media_type="text/event-stream",
                                     headers={**_headers(answer, request_id, False), "cache-control": "no-cache",
                                              "x-accel-buffering": "no"})
        finish = answer.final()
        return JSONResponse(response_body(answer, writer, finish), headers=_headers(answer, request_id, True, finish))
