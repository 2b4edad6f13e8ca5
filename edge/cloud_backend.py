"""The cloud backend: adapts ``cloud_bridge`` to the gateway's event stream and error shape.

``cloud_bridge`` knows nothing of the gateway; this thin layer turns a ``ChatRequest`` into an
OpenAI body, bridge events into ``TextDelta``/``Finish``, and ``CloudError`` into ``APIError``
with a status a kiosk SDK understands (429 stays 429 only when every provider refused; a dead
upstream is a 502/503/504, never a 500 with a traceback).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from cloud_bridge import CloudBridge, CloudError, ContentDelta, StreamDone
from cloud_bridge.config import CloudConfig
from cloud_bridge.errors import CloudErrorKind

from .disclosure import public_cloud_message
from .errors import APIError
from .types import ChatRequest, Finish, TextDelta, Usage

log = logging.getLogger("edgecloud.cloud")

K = CloudErrorKind
# Every kind a status and an OpenAI error code; a test holds this to the enum, so a new kind
# cannot fall through to a generic 502 unnoticed.
_STATUS: dict[CloudErrorKind, tuple[int, str]] = {
    K.RATE_LIMITED: (429, "rate_limit_exceeded"),
    K.BREAKER_OPEN: (503, "cloud_unavailable"),
    K.NO_PROVIDER: (503, "cloud_unconfigured"),
    K.CONNECT: (502, "cloud_connect_error"),
    K.TIMEOUT_CONNECT: (504, "cloud_timeout"),
    K.TIMEOUT_TTFT: (504, "cloud_timeout"),
    K.TIMEOUT_GAP: (504, "cloud_timeout"),
    K.TIMEOUT_TOTAL: (504, "cloud_timeout"),
    K.SERVER_ERROR: (502, "cloud_server_error"),
    K.BAD_RESPONSE: (502, "cloud_bad_response"),
    K.UPSTREAM_ERROR: (502, "cloud_upstream_error"),
    K.TOO_LARGE: (502, "cloud_response_too_large"),
    K.AUTH: (502, "cloud_auth_error"),
}
del K


def cloud_error_to_api(exc: CloudError) -> APIError:
    status, code = _STATUS.get(exc.kind, (502, "cloud_error"))
    headers = {}
    if status in (429, 503) and exc.retry_after_s:
        headers["Retry-After"] = str(max(1, round(exc.retry_after_s)))
    provider = f" ({exc.provider})" if exc.provider else ""
    # The bridge's own message names the upstream's host: logged, not shown (edge/disclosure.py).
    log.warning("cloud call failed (%s): %s", exc.kind, exc.message)
    message = f"Cloud backend failed{provider}: {public_cloud_message(exc)}"
    return APIError(status, message, "server_error", None, code, headers)


def request_body(req: ChatRequest) -> dict[str, Any]:
    body: dict[str, Any] = {
        "messages": [{"role": m.role, "content": m.content} for m in req.messages],
        "temperature": req.temperature,
        "top_p": req.top_p,
    }
    if req.max_tokens is not None:
        body["max_tokens"] = req.max_tokens
    if req.stop:
        body["stop"] = req.stop
    if req.seed is not None:
        body["seed"] = req.seed
    if req.user:
        body["user"] = req.user
    passthrough = req.extra.get("passthrough")
    if passthrough:
        body.update(passthrough)
    return body


class CloudBackend:
    name = "cloud"

    def __init__(self, config: CloudConfig, on_call: Callable[[Any], None] | None = None,
                 deadline_s: float | None = None) -> None:
        self.bridge = CloudBridge(config, on_call=on_call)
        self.deadline_s = deadline_s  # [server] request_deadline_s: the most one cloud call may take

    async def start(self) -> None:
        await self.bridge.start()

    async def aclose(self) -> None:
        await self.bridge.aclose()

    @property
    def enabled(self) -> bool:
        return self.bridge.enabled

    def available(self) -> bool:
        return self.bridge.available()

    def ttft_p95_s(self) -> float | None:
        return self.bridge.ttft_quantile_s(0.95)

    async def generate(self, req: ChatRequest, deadline_s: float | None = None) -> AsyncIterator[TextDelta | Finish]:
        stream = self.bridge.stream_chat(
            request_body(req), request_id=req.request_id, route_model=req.route_name,
            deadline_s=deadline_s if deadline_s is not None else self.deadline_s,
        )
        try:
            async for event in stream:
                if isinstance(event, ContentDelta):
                    if event.text:
                        yield TextDelta(event.text)
                elif isinstance(event, StreamDone):
                    usage = event.usage or {}
                    t = event.timings
                    timings = {
                        name: value
                        for name, value in (
                            ("dns", t.dns_ms), ("connect", t.connect_ms), ("tls", t.tls_ms),
                            ("upstream_ttfb", t.first_byte_ms), ("upstream_ttft", t.first_token_ms),
                        )
                        if value is not None
                    }
                    yield Finish(
                        event.finish_reason or "stop",
                        Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
                        timings,
                        event.model,
                    )
                    return
        except CloudError as exc:
            raise cloud_error_to_api(exc) from None
        finally:
            await stream.aclose()
