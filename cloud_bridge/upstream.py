"""Reading ONE upstream answer: status errors, the SSE stream, a plain JSON body.

Split from the client so that the orchestration (retries, breakers, fail-over, records) and the
byte-level reading of an answer (deadlines per read, strict SSE, limits, error shapes) can each
be read on their own. Every message goes through the redactor: upstreams echo keys back.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from cloud_bridge.config import ProviderConfig
from cloud_bridge.deadline import DeadlineExceeded, Watchdog
from cloud_bridge.errors import CloudError
from cloud_bridge.events import ContentDelta, StreamDone, ToolCallDelta
from cloud_bridge.redact import Redactor
from cloud_bridge.retry import parse_retry_after
from cloud_bridge.sse import SSEParser
from cloud_bridge.timings import PhaseTrace

_ERROR_BODY_LIMIT = 64 * 1024
_RETRYABLE_ERROR_WORDS = ("overload", "server_error", "rate_limit", "unavailable", "timeout", "internal")


class ResponseReader:
    """Reads the response of one attempt under its watchdog, filling the attempt's timings."""

    def __init__(self, cfg: ProviderConfig, redact: Redactor, trace: PhaseTrace, wd: Watchdog) -> None:
        self.cfg = cfg
        self.redact = redact
        self.trace = trace
        self.wd = wd

    def fail(self, kind: str, message: str, **kwargs: Any) -> CloudError:
        return CloudError(kind, self.redact(message), **kwargs)

    def timeout(self, kind: str, what: str) -> CloudError:
        cfg = self.cfg
        budget = {
            "timeout_ttft": f"time-to-first-token limit {cfg.ttft_timeout_s:g}s",
            "timeout_gap": f"inter-token gap limit {cfg.max_gap_s:g}s",
            "timeout_total": "total deadline",
        }[kind]
        return self.fail(kind, f"provider {cfg.name} exceeded the {budget} while {what}", status=None)

    async def read_limited(self, response: httpx.Response, limit_bytes: int) -> bytes | None:
        """Up to ``limit_bytes`` of the body under the watchdog's deadline; None when it is larger."""
        chunks: list[bytes] = []
        size = 0
        iterator = response.aiter_bytes()
        while True:
            try:
                chunk = await self.wd.wait(iterator.__anext__())
            except StopAsyncIteration:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit_bytes:
                return None
            chunks.append(chunk)

    async def status_error(self, response: httpx.Response) -> CloudError:
        """The error for a non-200 answer: kind by status, upstream message, Retry-After."""
        cfg = self.cfg
        status = response.status_code
        retry_after = parse_retry_after(response.headers)
        message = f"provider {cfg.name} answered HTTP {status}"
        try:
            raw = await self.read_limited(response, _ERROR_BODY_LIMIT)
        except (DeadlineExceeded, httpx.HTTPError):
            raw = b""  # the status alone is enough to act on
        if raw:
            detail = error_message(raw)
            if detail:
                message += f": {detail}"
        if status == 429:
            err_kind, retryable = "rate_limited", True
        elif status >= 500:
            err_kind, retryable = "server_error", status in cfg.retry_statuses
        elif status in (401, 403):
            err_kind, retryable = "auth", False
        elif status == 413:
            err_kind, retryable = "too_large", False
        else:
            err_kind, retryable = "upstream_error", status in cfg.retry_statuses
        return self.fail(err_kind, message, status=status, retry_after_s=retry_after, retryable=retryable)

    async def read_json(
        self, response: httpx.Response, upstream_id: str | None, requested_model: str
    ) -> AsyncIterator[ContentDelta | ToolCallDelta | StreamDone]:
        """A non-streaming answer: the whole text as one delta, each tool call whole, then StreamDone."""
        cfg = self.cfg
        trace = self.trace
        raw = await self.read_limited(response, cfg.max_response_bytes)
        if raw is None:
            message = f"response larger than {cfg.max_response_bytes} bytes"
            raise self.fail("too_large", message, retryable=False)
        try:
            data = json.loads(raw)
        except ValueError:
            raise self.fail("bad_response", "response is not JSON", status=200) from None
        if not isinstance(data, dict):
            raise self.fail("bad_response", "response is not a JSON object", status=200)
        if "error" in data:
            raise self.upstream_error(data["error"])
        try:
            choice = data["choices"][0]
            message = choice.get("message", {})
            text = message.get("content") or ""
            calls = message.get("tool_calls") or []
            finish = choice.get("finish_reason") or "stop"
        except (KeyError, IndexError, TypeError, AttributeError):
            raise self.fail("bad_response", "response has no choices", status=200) from None
        now_ms = trace.ms()
        trace.timings.first_token_ms = trace.timings.last_token_ms = now_ms
        if text:
            yield ContentDelta(text)
        for i, call in enumerate(calls if isinstance(calls, list) else ()):
            delta = tool_call_delta({**call, "index": i} if isinstance(call, dict) else call)
            if delta is None:
                raise self.fail("bad_response", "malformed tool call in the response", status=200)
            yield delta
        yield StreamDone(
            finish_reason=finish, usage=data.get("usage"), provider=cfg.name,
            model=data.get("model") or requested_model,
            upstream_request_id=upstream_id or data.get("id"), timings=trace.timings,
        )

    def upstream_error(self, obj: Any) -> CloudError:
        """An error object inside a 200 answer; retryable when it says overload/server error."""
        if isinstance(obj, dict):
            message = str(obj.get("message") or "upstream error")
            words = f"{obj.get('type', '')} {obj.get('code', '')}".lower()
        else:
            message, words = str(obj), ""
        retryable = any(w in words for w in _RETRYABLE_ERROR_WORDS)
        return self.fail("upstream_error", f"upstream error in stream: {message}", status=200,
                          retryable=retryable)

    async def read_sse(
        self,
        response: httpx.Response,
        ttft_deadline: float,
        hard: float,
        upstream_id: str | None,
        requested_model: str,
    ) -> AsyncIterator[ContentDelta | ToolCallDelta | StreamDone]:
        """A streamed answer: a delta per content token or tool-call fragment, then StreamDone;
        TTFT/gap/total deadlines."""
        cfg = self.cfg
        trace = self.trace
        timings = trace.timings
        parser = SSEParser()
        received = 0
        got_token = False
        last_token = 0.0
        finish_reason: str | None = None
        usage: dict[str, Any] | None = None
        model = requested_model
        saw_done = False
        first_event = True
        encoded = response.headers.get("content-encoding", "identity").lower() not in ("", "identity")
        iterator = response.aiter_bytes() if encoded else response.aiter_raw()
        while not saw_done:
            phase, kind = (last_token + cfg.max_gap_s, "timeout_gap") if got_token else (
                ttft_deadline, "timeout_ttft"
            )
            limit = phase
            if hard < phase:
                limit, kind = hard, "timeout_total"
            self.wd.set(limit, kind)
            try:
                chunk: bytes | None = await self.wd.wait(iterator.__anext__())
            except StopAsyncIteration:
                chunk = None
            if chunk is None:
                break
            received += len(chunk)
            if received > cfg.max_response_bytes:
                raise self.fail("too_large", f"stream larger than {cfg.max_response_bytes} bytes",
                                 retryable=False)
            for event in parser.feed(chunk):
                data = event.data
                if data[:1] != "{" and data.strip() == "[DONE]":
                    saw_done = True
                    break
                try:
                    obj = json.loads(data)
                except ValueError:
                    raise self.fail("bad_response", "malformed SSE event (not JSON)", status=200) from None
                if not isinstance(obj, dict):
                    raise self.fail("bad_response", "malformed SSE event (not an object)", status=200)
                if event.event == "error" or "error" in obj:
                    raise self.upstream_error(obj.get("error", obj))
                if first_event:  # id and model are the same in every chunk: read them once
                    first_event = False
                    if upstream_id is None and isinstance(obj.get("id"), str):
                        upstream_id = obj["id"]
                    if isinstance(obj.get("model"), str) and obj["model"]:
                        model = obj["model"]
                chunk_usage = obj.get("usage")
                if chunk_usage and isinstance(chunk_usage, dict):
                    usage = chunk_usage
                for choice in obj.get("choices") or ():
                    if not isinstance(choice, dict):
                        continue
                    delta = choice.get("delta") or {}
                    text = delta.get("content") if isinstance(delta, dict) else None
                    calls = delta.get("tool_calls") if isinstance(delta, dict) else None
                    if choice.get("finish_reason"):
                        finish_reason = choice["finish_reason"]
                    pieces: list[ContentDelta | ToolCallDelta] = [ContentDelta(text)] if text else []
                    for call in calls if isinstance(calls, list) else ():
                        piece = tool_call_delta(call)
                        if piece is None:
                            raise self.fail("bad_response", "malformed tool call in the stream", status=200)
                        pieces.append(piece)
                    for piece in pieces:
                        now = time.perf_counter()
                        if not got_token:
                            timings.first_token_ms = trace.ms(now)
                            got_token = True
                        timings.last_token_ms = trace.ms(now)
                        last_token = now
                        yield piece
                        # Time the caller spent before asking for more is not upstream silence.
                        last_token = time.perf_counter()
        if saw_done:
            await self.drain_tail(iterator, hard)
        if not saw_done and finish_reason is None:
            raise self.fail("connect", "the upstream stream ended before it finished", status=200)
        if not saw_done and parser.pending_bytes:
            raise self.fail("bad_response", "the upstream stream ended inside an event", status=200)
        yield StreamDone(
            finish_reason=finish_reason or "stop", usage=usage, provider=cfg.name, model=model,
            upstream_request_id=upstream_id, timings=timings,
        )

    async def drain_tail(self, iterator: AsyncIterator[bytes], hard: float) -> None:
        """Read what follows ``[DONE]`` (the chunked terminator) so the connection returns to the pool.

        Closing an HTTP/1.1 response with unread body makes httpcore drop the connection, and the
        next escalation would pay a new handshake.
        """
        self.wd.set(min(hard, time.perf_counter() + 0.5), "timeout_total")
        with contextlib.suppress(httpx.HTTPError, DeadlineExceeded):
            while True:
                try:
                    await self.wd.wait(iterator.__anext__())
                except StopAsyncIteration:
                    return


def tool_call_delta(call: Any) -> ToolCallDelta | None:
    """OpenAI's ``tool_calls[i]`` (whole or a streamed fragment) as a delta; None when malformed."""
    if not isinstance(call, dict):
        return None
    index = call.get("index", 0)
    function = call.get("function") or {}
    if isinstance(index, bool) or not isinstance(index, int) or not isinstance(function, dict):
        return None
    call_id, name, arguments = call.get("id"), function.get("name"), function.get("arguments") or ""
    if not isinstance(arguments, str):  # some providers send the object itself
        arguments = json.dumps(arguments, ensure_ascii=False)
    if (call_id is not None and not isinstance(call_id, str)) or (name is not None and not isinstance(name, str)):
        return None
    kind = call.get("type")
    return ToolCallDelta(index, call_id, name, arguments, kind if isinstance(kind, str) else None)


def error_message(raw: bytes) -> str:
    """The ``error.message`` of an OpenAI-style error body, else a short excerpt of the text."""
    try:
        data = json.loads(raw)
    except ValueError:
        return raw[:200].decode("utf-8", errors="replace").strip()
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or "")[:500]
        return str(err)[:500]
    return ""
