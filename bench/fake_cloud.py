"""A local, OpenAI-compatible fake cloud LLM with fault injection and a latency model.

Shared by the cloud_bridge tests, the gateway tests, the kiosk benchmark and the reliability
suite: the internet cannot be reached here, so this is "the cloud". It is a plain ASGI app (no
framework: it must be able to misbehave at the byte level: cut a stream, send malformed SSE,
hang before headers) served by uvicorn (HTTP/1.1) or hypercorn with TLS (HTTP/2 via ALPN).

Usage::

    from bench.fake_cloud import FakeCloudConfig, run_fake_cloud_in_thread

    handle = run_fake_cloud_in_thread(FakeCloudConfig(first_token_delay_s=0.05))
    # handle.base_url == "http://127.0.0.1:<port>/v1"; point an OpenAI client or the bridge at it
    handle.config.fault = "status"; handle.config.fault_status = 503; handle.config.fault_count = 1
    ...
    assert handle.state.chat_attempts == 2
    handle.stop()

``config`` is read on every request, so a test may change it between requests; ``state`` counts
what the server saw. Faults (``config.fault``):

=================  ===========================================================================
``none``           normal answer
``429``            429 with ``Retry-After: <retry_after>`` and/or ``retry-after-ms``
``status``         HTTP ``fault_status`` (500, 502, 503, 504, 400 ...) with an OpenAI error body
``hang``           accept the request, never send headers (for ``hang_s``)
``slow_first``     headers at once, first token after ``slow_first_s``
``stall``          ``stall_after`` tokens, then silence for ``stall_s``, then the rest
``cut``            ``cut_after`` tokens, then the connection is dropped (no [DONE], no final chunk);
                   over HTTP/2 the stream ends early instead (hypercorn cannot reset it)
``malformed``      after ``malformed_after`` tokens an SSE event whose data is not JSON
``error_in_stream`` 200, then (after ``error_after`` tokens) ``data: {"error": {...}}``
``huge``           an answer of ``huge_bytes`` bytes (streamed in 64 KiB tokens, or one JSON body)
=================  ===========================================================================

``fault_count`` limits a fault to the first N chat requests since it was set (then the server
answers normally), so "fails twice, then succeeds" is ``fault_count=2``; None = every request.
A refused connection is a closed port: :func:`refused_base_url`.

Latency model (``latency_model=True``, for benchmarks): time to first token drawn from a
lognormal fitted to ``ttft_p50_s``/``ttft_p99_s`` (``peak=True``: tail 1.5x heavier and
``peak_429_share`` of requests answered 429), then tokens at ``tokens_per_s``; optional
``connection_setup_s`` on the first request of each new connection (a stand-in for a far
TLS handshake). ``time_scale`` shrinks every delay for quick runs.

Answers are deterministic: ``"Echo: <last user message>"`` (or ``reply_text``) split into word
tokens, truncated at ``max_tokens`` (finish_reason "length"), with exact ``usage``.

Tools and structured output, the way OpenAI sends them: a request with ``tools`` (and a
``tool_choice`` other than ``none``, and no tool result as its last message) is answered with tool
calls: ``tool_calls`` (name + arguments objects) when set, else one call of the named or first tool
with arguments made from its parameter schema. Streamed, each call's first chunk carries ``index``,
``id``, ``type`` and ``function.name``; its ``arguments`` JSON follows in fragments of
``tool_fragment_chars`` characters, one chunk each, then ``finish_reason: "tool_calls"``; the
``cut`` fault counts those fragments, so a stream can be cut in the middle of a call. A tool result
as the last message is answered ``"Done: <result>"``. ``response_format`` ``json_schema`` is
answered with a JSON instance of the schema, ``json_object`` with ``{"echo": <last user message>}``.

Why one module of about 800 lines: it is a test double that must misbehave at the byte level, and
each fault above is a branch in the one request handler that writes those bytes; its config,
state, latency model and servers are small parts of that one handler's contract, which every suite
imports as one thing. Split by fault, a reader would chase one request across files.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import random
import socket
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_Z99 = 2.3263478740408408  # standard normal quantile at 0.99


def ttft_lognormal(p50_s: float, p99_s: float, peak: bool = False) -> tuple[float, float]:
    """(mu, sigma) of the latency model's lognormal TTFT through ``p50_s`` and ``p99_s``; peak hours
    spread it 1.5x (a heavier tail, same median). The benchmark's P99 bound uses the same fit."""
    mu = math.log(p50_s)
    sigma = max(1e-6, (math.log(p99_s) - mu) / _Z99)
    return mu, sigma * (1.5 if peak else 1.0)


@dataclass
class FakeCloudConfig:
    """What the fake does; mutable, read per request."""

    model: str = "fake-gpt"
    api_key: str | None = None  # when set, requests without "Bearer <api_key>" get 401
    api_key_header: str = "authorization"  # another name: the key comes bare in that header (Azure: api-key)
    reply_text: str | None = None  # None: "Echo: <last user message>"
    fault: str = "none"
    fault_count: int | None = None
    fault_status: int = 503
    retry_after: str | None = "1"  # Retry-After header of a 429 (seconds or HTTP date); None = absent
    retry_after_ms: int | None = None
    hang_s: float = 30.0
    slow_first_s: float = 2.0
    stall_after: int = 2
    stall_s: float = 5.0
    cut_after: int = 2
    malformed_after: int = 0
    error_after: int = 0
    error_type: str = "server_error"
    huge_bytes: int = 16 * 1024 * 1024
    # Normal pacing.
    first_token_delay_s: float = 0.0
    tokens_per_s: float = 0.0  # 0: as fast as possible
    # SSE quirks a strict parser must survive: comments/pings, multi-line data, CRLF, split writes.
    sse_quirks: bool = False
    # Latency model for benchmarks.
    latency_model: bool = False
    ttft_p50_s: float = 1.5
    ttft_p99_s: float = 4.0
    peak: bool = False
    peak_429_share: float = 0.1
    connection_setup_s: float = 0.0
    time_scale: float = 1.0
    seed: int = 1234
    # Tool calls to answer a request with tools: [{"name": ..., "arguments": {...}}]; None: made up.
    tool_calls: list[dict[str, Any]] | None = None
    tool_fragment_chars: int = 7

    def ttft_sample(self, rng: random.Random) -> float:
        """One TTFT from the lognormal with the configured median and P99 (heavier tail at peak)."""
        return rng.lognormvariate(*ttft_lognormal(self.ttft_p50_s, self.ttft_p99_s, self.peak))


@dataclass
class FakeCloudState:
    """What the fake saw. Counters only grow; ``reset()`` zeroes them between test phases."""

    chat_attempts: int = 0
    models_requests: int = 0
    completed_streams: int = 0
    disconnects: int = 0  # streams the client closed before the end
    faults_served: int = 0
    connections: int = 0
    last_headers: dict[str, str] = field(default_factory=dict)
    request_ids: list[str] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    http_versions: list[str] = field(default_factory=list)
    fault_used: int = 0
    _fault_key: tuple[str, int | None] = ("none", None)
    _seen_conns: set[tuple[str, int]] = field(default_factory=set)

    def reset(self) -> None:
        fresh = FakeCloudState()
        self.__dict__.update(fresh.__dict__)


def _tokens(text: str) -> list[str]:
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words) if w or i == 0]


def _count_tokens(text: str) -> int:
    """Words for space-separated scripts, one token per CJK character (as real tokenizers roughly do)."""
    cjk = sum(1 for ch in text if "\u3400" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff")
    return len(text.split()) + cjk


def _prompt_tokens(messages: list[Any]) -> int:
    count = 0
    for msg in messages:
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, str):
            count += _count_tokens(content) + 4
        elif isinstance(content, list):
            count += 4 + sum(_count_tokens(str(p.get("text", ""))) for p in content if isinstance(p, dict))
    return count


class _Cut(Exception):
    """Raised inside a response to make the server drop the connection mid-stream."""


def create_fake_cloud(
    config: FakeCloudConfig | None = None, state: FakeCloudState | None = None
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The ASGI app. Keep ``config``/``state`` to steer and observe it."""
    cfg = config or FakeCloudConfig()
    st = state or FakeCloudState()
    rng = random.Random(cfg.seed)
    ids = itertools.count(1)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        client = scope.get("client") or ("?", 0)
        conn_key = (str(client[0]), int(client[1]))
        new_conn = conn_key not in st._seen_conns
        if new_conn:
            st._seen_conns.add(conn_key)
            st.connections += 1
            if cfg.connection_setup_s > 0:
                await asyncio.sleep(cfg.connection_setup_s * cfg.time_scale)
        path = scope["path"].rstrip("/")
        key_header = cfg.api_key_header.lower()
        expected = f"Bearer {cfg.api_key}" if key_header == "authorization" else cfg.api_key
        if cfg.api_key is not None and headers.get(key_header) != expected:
            await _drain(receive)
            # Like real providers, echo (part of) the wrong key: the client must redact it.
            given = headers.get(key_header, "").removeprefix("Bearer ")
            await _json(send, 401, {"error": {"message": f"Incorrect API key provided: {given}.",
                                              "type": "invalid_request_error", "param": None,
                                              "code": "invalid_api_key"}})
            if path.endswith("/chat/completions"):
                st.chat_attempts += 1
                st.last_headers = headers
            return
        if path.endswith("/models") and scope["method"] == "GET":
            st.models_requests += 1
            await _json(send, 200, {"object": "list", "data": [
                {"id": cfg.model, "object": "model", "created": 0, "owned_by": "fake"}]})
            return
        if not (path.endswith("/chat/completions") and scope["method"] == "POST"):
            await _drain(receive)
            await _json(send, 404, {"error": {"message": "not found", "type": "invalid_request_error",
                                              "param": None, "code": "not_found"}})
            return
        raw = await _drain(receive)
        st.chat_attempts += 1
        st.last_headers = headers
        st.request_ids.append(headers.get("x-request-id", ""))
        st.http_versions.append(str(scope.get("http_version", "")))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            await _json(send, 400, {"error": {"message": "body is not JSON", "type": "invalid_request_error",
                                              "param": None, "code": None}})
            return
        st.bodies.append(body)
        fault = _active_fault(cfg, st)
        if cfg.latency_model and cfg.peak and fault == "none" and rng.random() < cfg.peak_429_share:
            fault = "429"
        if fault != "none":
            st.faults_served += 1
        await _chat(cfg, st, rng, next(ids), body, fault, receive, send, str(scope.get("http_version", "1.1")))

    return app


def _active_fault(cfg: FakeCloudConfig, st: FakeCloudState) -> str:
    """The fault for this request, honouring ``fault_count``.

    The count restarts whenever ``(fault, fault_count)`` changes or :meth:`FakeCloudHandle.set_fault`
    is called, so a test can arm "fail the next N requests" any number of times.
    """
    if cfg.fault == "none":
        return "none"
    key = (cfg.fault, cfg.fault_count)
    if st._fault_key != key:
        st._fault_key, st.fault_used = key, 0
    if cfg.fault_count is not None and st.fault_used >= cfg.fault_count:
        return "none"
    st.fault_used += 1
    return cfg.fault


async def _drain(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


async def _json(send: Send, status: int, obj: Any, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    data = json.dumps(obj).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*headers, *(extra or [])]})
    await send({"type": "http.response.body", "body": data})


async def _chat(
    cfg: FakeCloudConfig, st: FakeCloudState, rng: random.Random, n: int, body: dict[str, Any],
    fault: str, receive: Receive, send: Send, http_version: str = "1.1",
) -> None:
    scale = cfg.time_scale
    req_id = f"req_fake_{n}"
    id_header = [(b"x-request-id", req_id.encode())]
    if fault == "429":
        extra = list(id_header)
        if cfg.retry_after is not None:
            extra.append((b"retry-after", cfg.retry_after.encode()))
        if cfg.retry_after_ms is not None:
            extra.append((b"retry-after-ms", str(cfg.retry_after_ms).encode()))
        await _json(send, 429, {"error": {"message": "Rate limit reached, slow down.", "type": "requests",
                                          "param": None, "code": "rate_limit_exceeded"}}, extra)
        return
    if fault == "status":
        await _json(send, cfg.fault_status, {"error": {"message": f"fake upstream error {cfg.fault_status}",
                                                       "type": "server_error", "param": None, "code": None}},
                    id_header)
        return
    if fault == "hang":
        await asyncio.sleep(cfg.hang_s)
        return
    messages = body.get("messages") or []
    last_user = next((m.get("content") for m in reversed(messages)
                      if isinstance(m, dict) and m.get("role") == "user"), "")
    if not isinstance(last_user, str):
        last_user = json.dumps(last_user)
    text = cfg.reply_text if cfg.reply_text is not None else f"Echo: {last_user}"
    calls = _tool_calls(cfg, body, messages)
    if calls:
        await _tool_answer(cfg, st, rng, n, body, calls, fault, receive, send, http_version)
        return
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    if last.get("role") == "tool" and cfg.reply_text is None:
        text = f"Done: {last.get('content')}"
    structured = _structured_reply(body.get("response_format"), last_user)
    if structured is not None and cfg.reply_text is None:
        text = structured
    tokens = _tokens(text)
    if fault == "huge":
        piece = "x" * 65536
        tokens = [piece] * max(1, cfg.huge_bytes // len(piece))
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    finish = "stop"
    if isinstance(max_tokens, int) and max_tokens > 0 and len(tokens) > max_tokens and fault != "huge":
        tokens, finish = tokens[:max_tokens], "length"
    usage = {"prompt_tokens": _prompt_tokens(messages), "completion_tokens": len(tokens),
             "total_tokens": _prompt_tokens(messages) + len(tokens)}
    model = str(body.get("model") or cfg.model)
    ttft = cfg.first_token_delay_s
    if cfg.latency_model:
        ttft = cfg.ttft_sample(rng)
    if fault == "slow_first":
        ttft = cfg.slow_first_s
    interval = 1.0 / cfg.tokens_per_s if cfg.tokens_per_s > 0 else 0.0
    created = int(time.time())
    chat_id = f"chatcmpl-fake{n}"
    if not body.get("stream"):
        await asyncio.sleep(ttft * scale + interval * len(tokens) * scale)
        answer = {"id": chat_id, "object": "chat.completion", "created": created, "model": model,
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(tokens)},
                               "finish_reason": finish, "logprobs": None}], "usage": usage}
        if fault == "error_in_stream":
            answer = {"error": {"message": "fake error inside a 200 answer", "type": cfg.error_type,
                                "param": None, "code": None}}
        if fault == "malformed":
            data = b'{"id": "broken'
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"application/json"), *id_header]})
            await send({"type": "http.response.body", "body": data})
            return
        await _json(send, 200, answer, id_header)
        return

    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), *id_header]})
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    quirks = cfg.sse_quirks
    nl = b"\r\n" if quirks else b"\n"

    def chunk(delta: dict[str, Any], finish_reason: str | None = None, use: Any = None,
              choices: bool = True) -> bytes:
        obj: dict[str, Any] = {"id": chat_id, "object": "chat.completion.chunk", "created": created,
                               "model": model,
                               "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason,
                                            "logprobs": None}] if choices else []}
        if use is not None:
            obj["usage"] = use
        text_ = json.dumps(obj)
        if quirks:  # the same JSON over two data: lines (joined by "\n", still valid JSON)
            half = text_.index(",") + 1
            return b"data: " + text_[:half].encode() + nl + b"data:" + text_[half:].encode() + nl + nl
        return b"data: " + text_.encode() + nl + nl

    async def emit(data: bytes) -> None:
        if quirks and len(data) > 8:  # an event split across TCP writes
            mid = len(data) // 2
            await send({"type": "http.response.body", "body": data[:mid], "more_body": True})
            await asyncio.sleep(0.001)
            await send({"type": "http.response.body", "body": data[mid:], "more_body": True})
        else:
            await send({"type": "http.response.body", "body": data, "more_body": True})

    async def produce() -> None:
        if quirks:
            await emit(b": keep-alive" + nl + nl)
        await emit(chunk({"role": "assistant", "content": ""}))
        await asyncio.sleep(ttft * scale)
        for i, tok in enumerate(tokens):
            if fault == "cut" and i == cfg.cut_after:
                raise _Cut
            if fault == "malformed" and i == cfg.malformed_after:
                await emit(b"data: {\"id\": \"chatcmpl-broken\", \"choices\": [" + nl + nl)
                return
            if fault == "error_in_stream" and i == cfg.error_after:
                err = {"error": {"message": "fake error inside a 200 stream", "type": cfg.error_type,
                                 "param": None, "code": None}}
                await emit(b"data: " + json.dumps(err).encode() + nl + nl)
                return
            if fault == "stall" and i == cfg.stall_after:
                await asyncio.sleep(cfg.stall_s)
            elif i > 0 and interval:
                await asyncio.sleep(interval * scale)
            if quirks and i % 3 == 1:
                await emit(b": ping" + nl + nl)
            await emit(chunk({"content": tok}))
        await emit(chunk({}, finish))
        if include_usage:
            await emit(chunk({}, use=usage, choices=False))
        await emit(b"data: [DONE]" + nl + nl)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        st.completed_streams += 1

    producer = asyncio.ensure_future(produce())
    watcher = asyncio.ensure_future(_wait_disconnect(receive))
    done, _ = await asyncio.wait({producer, watcher}, return_when=asyncio.FIRST_COMPLETED)
    if watcher in done and producer not in done:
        st.disconnects += 1
        producer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await producer
        return
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    exc = producer.exception()
    if isinstance(exc, _Cut):
        if http_version == "2":
            # hypercorn cannot reset one h2 stream from ASGI (an app exception leaves the stream
            # open), so over HTTP/2 a cut is an early END_STREAM: no finish_reason, no [DONE].
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        raise exc  # uvicorn drops the connection: what a cut stream looks like to the client
    if exc is not None:
        raise exc
    if fault in ("malformed", "error_in_stream"):
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _tool_calls(cfg: FakeCloudConfig, body: dict[str, Any], messages: list[Any]) -> list[dict[str, Any]]:
    """The calls this request is answered with (none: a text answer)."""
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    choice = body.get("tool_choice")
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    if not tools or choice == "none" or last.get("role") == "tool":
        return []
    if cfg.tool_calls is not None:
        return [{"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))} for c in cfg.tool_calls]
    tool = tools[0]["function"]
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        tool = next((t["function"] for t in tools if t["function"].get("name") == name), tool)
    params = tool.get("parameters") or {"type": "object", "properties": {}}
    return [{"name": tool.get("name", ""), "arguments": json.dumps(sample_instance(params))}]


def _structured_reply(response_format: Any, last_user: str) -> str | None:
    if not isinstance(response_format, dict):
        return None
    if response_format.get("type") == "json_object":
        return json.dumps({"echo": last_user})
    if response_format.get("type") == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema") or {}
        return json.dumps(sample_instance(schema))
    return None


def sample_instance(schema: Any, root: Any = None, depth: int = 0) -> Any:
    """A small value that validates against ``schema`` (the common JSON Schema keywords)."""
    root = schema if root is None else root
    if not isinstance(schema, dict) or depth > 20:
        return None
    if "$ref" in schema:
        node: Any = root
        for part in str(schema["$ref"]).lstrip("#/").split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        return sample_instance(node, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return sample_instance(schema[key][0], root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {name: sample_instance(sub, root, depth + 1) for name, sub in props.items()}
    if kind == "array":
        items = schema.get("items") or {}
        return [sample_instance(items, root, depth + 1) for _ in range(max(1, schema.get("minItems", 1)))]
    if kind == "string":
        fmt = schema.get("format")
        value = {"date": "2026-12-03", "time": "10:30:00Z", "date-time": "2026-12-03T10:30:00Z",
                 "uuid": "123e4567-e89b-12d3-a456-426614174000"}.get(fmt, "B12")
        return value.ljust(schema.get("minLength", 0), "x")
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.5))
    if kind == "boolean":
        return True
    return None


async def _tool_answer(
    cfg: FakeCloudConfig, st: FakeCloudState, rng: random.Random, n: int, body: dict[str, Any],
    calls: list[dict[str, Any]], fault: str, receive: Receive, send: Send, http_version: str,
) -> None:
    """Tool calls, whole (non-streaming) or with their arguments in fragments (streaming)."""
    scale = cfg.time_scale
    id_header = [(b"x-request-id", f"req_fake_{n}".encode())]
    created = int(time.time())
    chat_id = f"chatcmpl-fake{n}"
    model = str(body.get("model") or cfg.model)
    ids = [f"call_fake{n}_{i}" for i in range(len(calls))]
    step = max(1, cfg.tool_fragment_chars)
    pieces = [[c["arguments"][i:i + step] for i in range(0, len(c["arguments"]), step)] or [""] for c in calls]
    prompt = _prompt_tokens(body.get("messages") or [])
    completion = sum(len(p) for p in pieces) + 2 * len(calls)
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    ttft = cfg.ttft_sample(rng) if cfg.latency_model else cfg.first_token_delay_s
    if not body.get("stream"):
        await asyncio.sleep(ttft * scale)
        message = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [
            {"id": ids[i], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for i, c in enumerate(calls)]}
        await _json(send, 200, {"id": chat_id, "object": "chat.completion", "created": created, "model": model,
                                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls",
                                             "logprobs": None}], "usage": usage}, id_header)
        return
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), *id_header]})

    def chunk(delta: dict[str, Any], finish_reason: str | None = None, use: Any = None) -> bytes:
        obj: dict[str, Any] = {"id": chat_id, "object": "chat.completion.chunk", "created": created, "model": model,
                               "choices": [] if use is not None else [
                                   {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}
        if use is not None:
            obj["usage"] = use
        return b"data: " + json.dumps(obj).encode() + b"\n\n"

    async def emit(data: bytes) -> None:
        await send({"type": "http.response.body", "body": data, "more_body": True})

    await emit(chunk({"role": "assistant", "content": None}))
    await asyncio.sleep(ttft * scale)
    sent = 0
    for i, call in enumerate(calls):
        await emit(chunk({"tool_calls": [{"index": i, "id": ids[i], "type": "function",
                                          "function": {"name": call["name"], "arguments": ""}}]}))
        for piece in pieces[i]:
            if fault == "cut" and sent == cfg.cut_after:
                raise _Cut  # uvicorn drops the connection in the middle of the call
            sent += 1
            await emit(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    await emit(chunk({}, "tool_calls"))
    if (body.get("stream_options") or {}).get("include_usage"):
        await emit(chunk({}, use=usage))
    await emit(b"data: [DONE]\n\n")
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    st.completed_streams += 1


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


# --------------------------------------------------------------------------- running it


@dataclass
class FakeCloudHandle:
    """A running fake: ``base_url`` ends in ``/v1``; ``ca_file`` is set for the TLS/HTTP/2 server."""

    base_url: str
    config: FakeCloudConfig
    state: FakeCloudState
    port: int
    ca_file: str | None
    _stop: Callable[[], None]

    def stop(self) -> None:
        self._stop()

    def reset(self) -> None:
        """Back to a default config and zeroed counters (fixtures share one server between tests)."""
        fresh = FakeCloudConfig()
        for name in fresh.__dataclass_fields__:
            setattr(self.config, name, getattr(fresh, name))
        self.state.reset()

    def set_fault(self, fault: str = "none", count: int | None = None, **fields: Any) -> None:
        """Arm a fault for the next ``count`` chat requests (None: all), setting any other config field."""
        for name, value in fields.items():
            if not hasattr(self.config, name):
                raise AttributeError(f"FakeCloudConfig has no field {name!r}")
            setattr(self.config, name, value)
        self.config.fault, self.config.fault_count = fault, count
        self.state.fault_used = 0
        self.state._fault_key = (fault, count)

    def __enter__(self) -> FakeCloudHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def refused_base_url() -> str:
    """A URL whose port was free a moment ago and has nothing listening: connect is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


def run_fake_cloud_in_thread(
    config: FakeCloudConfig | None = None, http2_tls: bool = False, state: FakeCloudState | None = None
) -> FakeCloudHandle:
    """Serve the fake on 127.0.0.1:<free port> in a daemon thread; returns when it accepts requests.

    ``http2_tls=False``: uvicorn, plain HTTP/1.1. ``http2_tls=True``: hypercorn with a certificate
    for 127.0.0.1/localhost from a throw-away ``trustme`` CA (``handle.ca_file``), h2 via ALPN.
    """
    cfg = config or FakeCloudConfig()
    st = state or FakeCloudState()
    app = create_fake_cloud(cfg, st)
    sock = _bound_socket()
    port = sock.getsockname()[1]
    if not http2_tls:
        return _run_uvicorn(app, sock, port, cfg, st)
    return _run_hypercorn(app, sock, port, cfg, st)


def _run_uvicorn(app: Any, sock: socket.socket, port: int, cfg: FakeCloudConfig,
                 st: FakeCloudState) -> FakeCloudHandle:
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="off", access_log=False,
                                           timeout_keep_alive=120, http="h11"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                              name=f"fake-cloud-{port}")
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("fake cloud (uvicorn) did not start")
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()

    return FakeCloudHandle(f"http://127.0.0.1:{port}/v1", cfg, st, port, None, stop)


def _run_hypercorn(app: Any, sock: socket.socket, port: int, cfg: FakeCloudConfig,
                   st: FakeCloudState) -> FakeCloudHandle:
    import trustme
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    tmp = Path(tempfile.mkdtemp(prefix="fake-cloud-tls-"))
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_file = tmp / "ca.pem"
    cert_file = tmp / "server.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    config.certfile = str(cert_file)
    config.keyfile = str(cert_file)
    config.alpn_protocols = ["h2", "http/1.1"]
    config.loglevel = "CRITICAL"
    config.accesslog = None
    config.errorlog = None
    config.keep_alive_timeout = 120
    config.h2_max_concurrent_streams = 1000

    loop = asyncio.new_event_loop()
    stop_event: asyncio.Event | None = None
    started = threading.Event()

    async def main() -> None:
        nonlocal stop_event
        stop_event = asyncio.Event()
        started.set()
        await serve(app, config, shutdown_trigger=stop_event.wait)  # type: ignore[arg-type]

    def runner() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main())

    thread = threading.Thread(target=runner, daemon=True, name=f"fake-cloud-h2-{port}")
    thread.start()
    started.wait(10)
    _wait_port(port)

    def stop() -> None:
        if stop_event is not None:
            loop.call_soon_threadsafe(stop_event.set)
        thread.join(timeout=10)
        with contextlib.suppress(OSError):  # hypercorn may have closed the fd already
            sock.close()
        for path in (ca_file, cert_file):
            with contextlib.suppress(OSError):
                os.unlink(path)
        with contextlib.suppress(OSError):
            tmp.rmdir()

    return FakeCloudHandle(f"https://127.0.0.1:{port}/v1", cfg, st, port, str(ca_file), stop)


def _wait_port(port: int, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.02)
    raise RuntimeError(f"fake cloud did not listen on port {port}")


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.fake_cloud``: serve until killed; prints ``READY <base_url> <ca_file|->``.

    Benchmarks run the fake in its own process so that it does not share a GIL with the client
    being measured.
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m bench.fake_cloud")
    parser.add_argument("--http2-tls", action="store_true", help="hypercorn + TLS + h2 instead of uvicorn")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=JSON",
                        help="a FakeCloudConfig field, e.g. --set first_token_delay_s=0.2 --set tokens_per_s=30")
    args = parser.parse_args(argv)
    cfg = FakeCloudConfig()
    for item in args.set:
        name, _, raw = item.partition("=")
        if name not in cfg.__dataclass_fields__:
            parser.error(f"unknown field {name!r}")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        setattr(cfg, name, value)
    handle = run_fake_cloud_in_thread(cfg, http2_tls=args.http2_tls)
    print(f"READY {handle.base_url} {handle.ca_file or '-'}", flush=True)
    try:
        sys.stdin.read()  # until the parent closes our stdin (or Ctrl-D)
    except KeyboardInterrupt:
        pass
    handle.stop()


if __name__ == "__main__":  # pragma: no cover - manual / benchmark use
    main()
