"""The FastAPI app: OpenAI-compatible endpoints over the pipeline, plus health and admin routes.

``create_app(settings)`` builds everything inside the lifespan (no module-level state): the local
model starts loading in the background so ``/healthz`` answers at once and ``/readyz`` says 503
until the model is in memory. Heavy imports (llama.cpp, onnxruntime, the cloud client) happen
there too, so ``edgecloud serve`` is listening within a fraction of a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
import sys
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import __version__
from .admin_auth import shows_admin_token
from .assembly import build_services
from .config import ROUTE_NAMES, Settings
from .disclosure import public_load_error
from .errors import APIError, internal, invalid
from .feature_routes import mount_feature_routes
from .openai_format import DONE, ChunkWriter, assemble_tool_calls, completion_body
from .pipeline import Answer, Pipeline, Preview, Refused, cache_reason
from .router import Refusal, RefusalKind
from .schemas import PART_TYPES, ROLES, parse_chat_request
from .services import Services
from .types import ChatRequest, Finish, TextDelta, ToolCallDelta

log = logging.getLogger("edgecloud.app")

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")

CHAT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "model": {"type": "string", "default": "edgecloud-auto"},
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["role"],
                "properties": {
                    "role": {"type": "string", "enum": sorted(ROLES)},
                    "content": {
                        "anyOf": [
                            {"type": "string"},
                            {"type": "array", "items": {"type": "object", "required": ["type"], "properties": {
                                "type": {"type": "string", "enum": sorted(PART_TYPES)},
                                "text": {"type": "string"}}}},
                            {"type": "null"},
                        ]
                    },
                },
            },
        },
        "max_tokens": {"type": "integer", "minimum": 1},
        "max_completion_tokens": {"type": "integer", "minimum": 1},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "top_p": {"type": "number", "minimum": 0, "maximum": 1},
        "stop": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": 4}]},
        "seed": {"type": "integer"},
        "n": {"type": "integer", "minimum": 1, "maximum": 1},
        "stream": {"type": "boolean"},
        "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
        "user": {"type": "string"},
    },
}
ERROR_SCHEMA = {
    "type": "object",
    "properties": {"error": {"type": "object", "properties": {
        "message": {"type": "string"}, "type": {"type": "string"},
        "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}},
}
_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"description": "OpenAI-style error", "content": {"application/json": {"schema": ERROR_SCHEMA}}}
    for code in (400, 404, 413, 429, 503)
}


def error_response(exc: APIError, request_id: str | None = None) -> JSONResponse:
    headers = dict(exc.headers)
    if request_id:
        headers["x-request-id"] = request_id
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


# The router refuses with a kind and a reason; the status each kind gets is an HTTP matter, chosen here.
REFUSAL_STATUS: dict[RefusalKind, int] = {
    RefusalKind.EDGE_UNAVAILABLE: 503,
    RefusalKind.CLOUD_UNCONFIGURED: 503,
    RefusalKind.CLOUD_UNAVAILABLE: 503,
    RefusalKind.NO_BACKEND: 503,
    RefusalKind.UNSUPPORTED_PARAMETER: 400,
    RefusalKind.CONTEXT_LENGTH_EXCEEDED: 400,
}


def refusal_error(refusal: Refusal) -> APIError:
    """The OpenAI-style error of a router refusal: 503 when no backend can take it now, 400 when
    the request asks what no available backend can give."""
    status = REFUSAL_STATUS[refusal.kind]
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return APIError(status, refusal.message, kind, refusal.param, refusal.kind.value)


async def answer_for(pipeline: Pipeline, req: ChatRequest) -> Answer:
    """The pipeline's answer: started when streamed, whole when not (fall-backs are the pipeline's).
    A router refusal becomes its HTTP error here, and is counted."""
    try:
        return await (pipeline.start(req) if req.stream else pipeline.complete(req))
    except Refused as refused:
        error = refusal_error(refused.refusal)
        pipeline.count_refused(refused, error)
        raise error from None


def preview_body(preview: Preview) -> dict[str, Any]:
    """``POST /v1/route``'s body: the decision, its refusal as an OpenAI error, what the cache holds."""
    decision = preview.decision
    out = decision.as_dict()
    if decision.refusal is not None:
        out["error"] = refusal_error(decision.refusal).body()["error"]
    out["decision_ms"] = round(preview.decision_ms, 3)
    cache = preview.cache
    if cache is not None:
        hit = cache.hit
        out["cache"] = {"read": cache.read, "write": cache.write, "hit": hit is not None if cache.disclosed else None,
                        "reason": hit.reason if hit else cache.reason}
        if hit is not None:
            out["route"], out["reason"] = "cache", cache_reason(hit)
    return out


def request_id_of(request: Request) -> str:
    given = request.headers.get("x-request-id")
    if given and _REQUEST_ID.match(given):
        return given
    return uuid.uuid4().hex


async def read_json_body(request: Request, limit: int, timeout_s: float = 15.0) -> Any:
    """Read at most ``limit`` bytes within ``timeout_s`` (slow bodies are cut), then parse JSON."""
    length = request.headers.get("content-length")
    if length is not None:
        try:
            declared = int(length)
        except ValueError:
            raise invalid("Invalid Content-Length header.", None, "invalid_request") from None
        if declared > limit:
            raise APIError(413, f"Request body too large: {declared} bytes, the limit is {limit}.",
                           "invalid_request_error", None, "request_too_large")

    async def collect() -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise APIError(413, f"Request body too large: over the {limit}-byte limit.",
                               "invalid_request_error", None, "request_too_large")
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        if sys.version_info >= (3, 11):
            async with asyncio.timeout(timeout_s):  # novermin (3.11 branch); no extra task per request
                raw = await collect()
        else:  # pragma: no cover - Python 3.10
            raw = await asyncio.wait_for(collect(), timeout_s)
    except asyncio.TimeoutError:
        raise APIError(408, "The request body arrived too slowly.", "invalid_request_error", None,
                       "request_timeout") from None
    if not raw:
        raise invalid("The request body is empty: a JSON object is expected.", None, "invalid_json")
    try:
        # Strict UTF-8 (json.loads on bytes would let UTF-8-encoded surrogates through), and no lone
        # surrogate from a "\ud800" escape either: both used to reach the tokenizer as a 500.
        value = json.loads(raw.decode("utf-8-sig"))
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        return value
    except (UnicodeDecodeError, UnicodeEncodeError):
        raise invalid("The request body is not valid UTF-8.", None, "invalid_json") from None
    except RecursionError:
        raise invalid("The request body is nested too deeply.", None, "invalid_json") from None
    except ValueError as exc:
        raise invalid(f"The request body is not valid JSON: {exc}.", None, "invalid_json") from None


def require_admin_factory(app: FastAPI):
    """A FastAPI dependency: the admin bearer token, compared in constant time."""

    async def require_admin(request: Request) -> None:
        settings: Settings = app.state.settings
        token = settings.server.admin_token
        if token is None or not token.get_secret_value():
            raise APIError(403, "The admin API is disabled: set [server] admin_token.", "permission_error",
                           None, "admin_disabled")
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        expected = token.get_secret_value().encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            raise APIError(401, "Missing or invalid admin token.", "authentication_error", None,
                           "invalid_admin_token", {"WWW-Authenticate": "Bearer"})

    return require_admin


# Backend timings are milliseconds unless named here (a count and a rate).
_NOT_MS = frozenset({"prompt_tokens_reused", "tokens_per_s"})


def _timings(answer: Answer, finish: Finish | None) -> dict[str, Any]:
    """The ``timings`` object of a response's last chunk (as llama-server sends one)."""
    marks = answer.timer.marks
    out: dict[str, Any] = {"route": answer.route, "reason": answer.reason}
    if finish is not None:
        out.update({k if k in _NOT_MS else f"{k}_ms": round(v, 2) for k, v in finish.timings.items()})
    if "ttft" in marks:
        out["ttft_ms"] = round(marks["ttft"], 2)
    out["total_ms"] = round(answer.timer.elapsed_ms(), 2)
    return out


def _headers(answer: Answer, request_id: str, with_total: bool, finish: Finish | None = None) -> dict[str, str]:
    timer = answer.timer
    if finish is not None:
        for name in ("queue", "prefill"):
            if name in finish.timings:
                timer.marks.setdefault(name, finish.timings[name])
    if with_total:
        timer.mark("total")
    headers = {
        "x-request-id": request_id,
        "x-edgecloud-route": answer.route,
        "x-edgecloud-reason": answer.reason,
        "server-timing": timer.server_timing(),
    }
    if answer.degraded:
        headers["x-edgecloud-degraded"] = answer.degraded
    if answer.cache:
        headers["x-edgecloud-cache"] = answer.cache
    return headers


async def _sse(answer: Answer, writer: ChunkWriter, include_usage: bool) -> AsyncIterator[bytes]:
    yield writer.role()
    try:
        async for event in answer.events():
            if isinstance(event, TextDelta):
                yield writer.content(event.text)
            elif isinstance(event, ToolCallDelta):
                yield writer.tool_call(event)
            else:
                timings = _timings(answer, event)
                yield writer.finish(event.finish_reason, None if include_usage else timings)
                if include_usage:
                    yield writer.usage(event, timings)
    except APIError as exc:
        yield writer.error(exc)
    except asyncio.CancelledError:
        raise
    except Exception:  # never a hung stream: an error event, then [DONE]
        log.exception("stream failed")
        yield writer.error(internal("The stream failed."))
    yield DONE


def create_app(settings: Settings) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = build_services(settings)
        app.state.services = services
        await services.start()
        from .systemd_notify import SystemdNotify

        notify = SystemdNotify(services)  # READY=1 and watchdog pings under systemd; else a no-op
        notify.start()
        try:
            yield
        finally:
            await notify.aclose()
            await services.aclose()

    docs = settings.server.api_docs
    app = FastAPI(title="edgecloud gateway", version=__version__, lifespan=lifespan,
                  docs_url="/docs" if docs else None, redoc_url="/redoc" if docs else None,
                  openapi_url="/openapi.json" if docs else None)
    app.state.settings = settings
    require_admin = require_admin_factory(app)
    app.state.require_admin = require_admin

    from .limits import BodyFirst, InFlightLimit

    app.add_middleware(InFlightLimit, limit=settings.server.limit_concurrency)
    app.add_middleware(BodyFirst, max_bytes=settings.server.max_body_bytes,  # outside: no slot while a body arrives
                       timeout_s=settings.server.body_timeout_s)
    if settings.server.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(settings.server.cors_origins),
                           allow_methods=["GET", "POST"], allow_headers=["*"])
    from .http_guard import HttpGuard, policy_for

    server = settings.server  # outermost: refused before CORS or the in-flight count sees them
    app.add_middleware(HttpGuard, policy=policy_for(server.host, server.allowed_hosts, server.cors_origins))

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc, request.headers.get("x-request-id"))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return error_response(invalid(first.get("msg", "Invalid request."), loc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return error_response(APIError(exc.status_code, str(exc.detail), kind, None, None,
                                       dict(exc.headers or {})))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response(internal())

    def services_of(request: Request) -> Services:
        return request.app.state.services

    async def chat_request_of(request: Request) -> ChatRequest:
        """The body of a chat request, size- and time-limited, validated; ``APIError`` if not."""
        body = await read_json_body(request, settings.server.max_body_bytes)
        return parse_chat_request(body, settings, request.headers)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], responses={503: {"description": "model loading or failed"}})
    async def readyz(request: Request) -> JSONResponse:
        edge = services_of(request).edge
        if edge.ready:
            return JSONResponse({"status": "ready", "model": edge.model.name, "version": edge.model.version})
        status = "loading" if edge.loading or edge.load_error is None else "failed"
        admin = shows_admin_token(request.headers.get("authorization"), settings.server.admin_token)
        error = edge.load_error if admin else public_load_error(edge.load_error)  # paths only for the admin
        return JSONResponse({"status": status, "error": error}, status_code=503)

    @app.get("/v1/models", tags=["openai"])
    async def list_models() -> dict[str, Any]:
        created = int(time.time())
        names = list(ROUTE_NAMES) + [a for a in settings.aliases if a not in ROUTE_NAMES]
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "edgecloud"} for name in names
        ]}

    @app.post(
        "/v1/chat/completions",
        tags=["openai"],
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": CHAT_SCHEMA}}}},
        responses=_ERROR_RESPONSES,
    )
    async def chat_completions(request: Request) -> Response:
        request_id = request_id_of(request)
        pipeline = services_of(request).pipeline
        try:
            req = await chat_request_of(request)
        except APIError as exc:
            pipeline.count_rejected(request_id, exc)  # refused before the pipeline: still counted
            return error_response(exc, request_id)
        req.request_id = request_id
        try:
            answer = await answer_for(pipeline, req)  # the pipeline records its own failures
        except APIError as exc:
            return error_response(exc, request_id)
        completion_id = f"chatcmpl-{request_id}"
        if req.stream:
            writer = ChunkWriter(completion_id, req.model)
            return StreamingResponse(
                _sse(answer, writer, req.include_usage),
                media_type="text/event-stream",
                headers={**_headers(answer, request_id, False), "cache-control": "no-cache",
                         "x-accel-buffering": "no"},
            )
        finish = answer.final()
        body_out = completion_body(completion_id, req.model, answer.text, finish, _timings(answer, finish),
                                   assemble_tool_calls(answer.tool_calls))
        return JSONResponse(body_out, headers=_headers(answer, request_id, True, finish))

    @app.post(
        "/v1/route",
        tags=["edgecloud"],
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": CHAT_SCHEMA}}}},
        responses=_ERROR_RESPONSES,
    )
    async def route(request: Request) -> JSONResponse:
        """The router's decision for a chat body, without generating anything."""
        request_id = request_id_of(request)
        try:
            req = await chat_request_of(request)
        except APIError as exc:
            return error_response(exc, request_id)
        # Whether a question is cached tells what others asked: the admin token's to know.
        preview = await services_of(request).pipeline.preview(req, peek_cache=req.cache_admin)
        return JSONResponse(preview_body(preview), headers={"x-request-id": request_id})

    from .responses_api import mount_responses

    mount_responses(app, settings)  # POST /v1/responses, over the same pipeline
    mount_feature_routes(app, require_admin)
    return app
