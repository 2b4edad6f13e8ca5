"""The edge backend for requests the device answers under a grammar: structured output and tool calls.

``LocalModel`` only samples under ``req.grammar``; what the grammar is for lives here, so the model
runner stays one job. For a ``response_format`` the answer streams as text (as OpenAI streams JSON
content) and is validated at its end; for tools the answer is held back only as long as it could
still be the start of a call, then either passed on as text (``tool_choice: auto``) or parsed into
OpenAI's ``tool_calls`` with ``finish_reason: "tool_calls"``. An answer that fails its check is an
error (a non-streaming request then goes to the cloud when the policy allows), never a wrong form
with status 200.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from .errors import APIError
from .structured import check_answer, schema_hint
from .tools import call_deltas, call_opener, parse_calls, tools_grammar, wants_call
from .tools import edge_blocker as tools_blocker
from .types import ChatRequest, Finish, Message, TextDelta, ToolCallDelta

if TYPE_CHECKING:
    from .backends import EdgeBackend

Events = AsyncIterator[TextDelta | ToolCallDelta | Finish]


def edge_blocker(req: ChatRequest, edge_tools: str) -> str | None:
    """Why the device cannot honour this request's tools, ``response_format`` or another field only the
    cloud implements (a router reason such as ``response-format:unsupported:minimum`` or
    ``fields:logprobs``); None when it can."""
    if req.extra.get("cloud_only"):
        return "fields:" + ",".join(req.extra["cloud_only"])
    spec = req.output
    if spec is not None and spec.kind != "text":
        if wants_call(req):
            return "tools:with-response-format"
        if spec.unsupported:
            return "response-format:unsupported:" + ",".join(spec.unsupported)
    if req.extra.get("tools_unconvertible"):
        return "tools:unsupported-schema:not-convertible"
    return tools_blocker(req, edge_tools)


def edge_note(req: ChatRequest, edge_tools: str) -> str | None:
    """The router's note when the device may answer under a grammar (``/v1/route`` shows it)."""
    if wants_call(req):
        return f"tools:edge-grammar:{edge_tools}"
    if req.output is not None and req.output.kind != "text":
        return f"response-format:edge-grammar:{req.output.kind}"
    return None


def blocker_param(reason: str) -> str:
    """The request field a blocker reason is about (for a 400 that names it)."""
    if reason.startswith("fields:"):
        return reason[len("fields:"):].split(",")[0]
    return "response_format" if reason.startswith("response-format") else "tools"


def prepare(req: ChatRequest, edge_tools: str) -> None:
    """Give a tool request the device can serve its grammar (the template's call format is known
    only once a model is loaded, so this runs at decision time, before the router, not at parse time)."""
    if wants_call(req) and req.grammar is None and edge_blocker(req, edge_tools) is None:
        try:
            req.grammar = tools_grammar(req, edge_tools)
        except Exception:  # the converter asserts on shapes it cannot read: the cloud takes the request
            req.extra["tools_unconvertible"] = True
            return
        req.extra["tool_format"] = edge_tools


def offered_tools(req: ChatRequest) -> list[dict[str, Any]] | None:
    """The tools the chat template renders for ``req`` (None: none): only those of a request the
    device may answer with its tool-call format (``prepare`` marked it)."""
    return req.tools if "tool_format" in req.extra else None


def request_constraints(llama: Any, req: ChatRequest) -> tuple[list[dict[str, Any]] | None, Any]:
    """What the model runner needs for ``req``: the tools to render into the chat template (None:
    no tools) and a ``LlamaGrammar`` for its sampler chain (None: free text).

    The grammar is parsed once here first: llama.cpp answers an unparsable grammar with a NULL
    sampler, which must never reach the chain. Runs on the generation thread."""
    tools = offered_tools(req)
    if req.grammar is None:
        return tools, None
    from llama_cpp.llama_grammar import LlamaGrammar

    from models import llama_runtime

    lib = llama_runtime.lib()
    probe = lib.llama_sampler_init_grammar(llama_runtime.vocab(llama), req.grammar.encode("utf-8"), b"root")
    if not probe:
        raise APIError(400, "The request's schema gives a grammar llama.cpp cannot parse.",
                       "invalid_request_error", "response_format", "invalid_grammar")
    lib.llama_sampler_free(probe)
    return tools, LlamaGrammar.from_string(req.grammar)


class ConstrainedEdge:
    """Wraps ``LocalModel``: requests without a grammar go straight through."""

    name = "edge"

    def __init__(self, edge: EdgeBackend) -> None:
        self.edge = edge

    def __getattr__(self, name: str) -> Any:
        return getattr(self.edge, name)

    def generate(self, req: ChatRequest) -> Events:
        if req.grammar is None:
            return self.edge.generate(req)
        if "tool_format" in req.extra:
            return self._tool_answer(req, req.extra["tool_format"])
        return self._structured_answer(req)

    async def _structured_answer(self, req: ChatRequest) -> Events:
        spec = req.output
        parts: list[str] = []
        async for event in self.edge.generate(with_hint(req)):
            if isinstance(event, TextDelta):
                parts.append(event.text)
            elif isinstance(event, Finish) and event.finish_reason == "stop" and spec is not None:
                errors = check_answer("".join(parts), spec)
                if errors:
                    raise APIError(502, f"The on-device answer does not match response_format: {errors[0]}",
                                   "server_error", "response_format", "edge_invalid_output")
            yield event

    async def _tool_answer(self, req: ChatRequest, fmt: str) -> Events:
        opener = call_opener(fmt)
        held = ""
        mode: str | None = None  # "call" once the answer starts like a call, "text" once it cannot
        async for event in self.edge.generate(req):
            if isinstance(event, TextDelta):
                if mode == "text":
                    yield event
                    continue
                held += event.text
                if mode is None:
                    if held.startswith(opener):
                        mode = "call"
                    elif not opener.startswith(held):
                        mode = "text"
                        yield TextDelta(held)
                continue
            if not isinstance(event, Finish):
                continue
            if mode == "text" or (mode is None and not held):
                yield event
                return
            if event.finish_reason != "stop":
                raise APIError(502, "The on-device model ran out of tokens inside a tool call "
                               f"(finish_reason {event.finish_reason!r}); raise max_tokens.",
                               "server_error", "max_tokens", "edge_truncated_tool_call")
            try:
                calls = parse_calls(held, fmt, req)
            except ValueError as exc:
                raise APIError(502, f"The on-device tool call is not usable: {exc}", "server_error", "tools",
                               "edge_invalid_output") from None
            for delta in call_deltas(calls):
                yield delta
            yield Finish("tool_calls", event.usage, event.timings, event.model)
            return


def with_hint(req: ChatRequest) -> ChatRequest:
    """A copy of ``req`` whose system prompt ends with what the answer must look like."""
    if req.output is None or req.output.kind == "text":
        return req
    hint = schema_hint(req.output)
    messages = list(req.messages)
    for i, m in enumerate(messages):
        if m.role in ("system", "developer"):
            messages[i] = dataclasses.replace(m, content=f"{m.content}\n\n{hint}" if m.content else hint)
            break
    else:
        messages.insert(0, Message("system", hint))
    return dataclasses.replace(req, messages=messages)
