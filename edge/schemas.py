"""Validation of the OpenAI chat completions body into a ``ChatRequest``.

Written by hand rather than as a pydantic model so that each error names the exact field the way
OpenAI does (``messages[2].content[0].type``) and so the hot path does no more work than needed.
"""

from __future__ import annotations

import math
from typing import Any

from .admin_auth import shows_admin_token
from .config import Settings
from .errors import APIError, invalid, model_not_found
from .types import ChatRequest, Message

# The accepted values, in one place: the OpenAPI schema in ``edge.app`` lists these same sets.
ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
NON_TEXT_PARTS = {"image_url", "input_image", "input_audio", "file"}  # accepted, routed to the cloud
PART_TYPES = {"text"} | NON_TEXT_PARTS


def _number(body: dict[str, Any], name: str, lo: float, hi: float, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise invalid(f"'{name}' must be a number.", name, "invalid_type")
    if not lo <= value <= hi:
        raise invalid(f"'{name}' must be between {lo:g} and {hi:g}, got {value}.", name)
    return float(value)


def _content_text(content: Any, where: str, req: ChatRequest) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"'{where}' must be a string or a list of content parts.", where, "invalid_type")
    texts: list[str] = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise invalid(f"'{at}' must be an object.", at, "invalid_type")
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise invalid(f"'{at}.text' must be a string.", f"{at}.text", "invalid_type")
            texts.append(text)
        elif kind in NON_TEXT_PARTS:
            req.has_images = True
            req.extra.setdefault("non_text_params", []).append(f"{at}.type")
        else:
            raise invalid(f"'{at}.type' must be one of {', '.join(sorted(PART_TYPES))}; got {kind!r}.", f"{at}.type")
    return "".join(texts)


def parse_chat_request(body: Any, settings: Settings, headers: dict[str, str] | None = None) -> ChatRequest:
    """Validate an OpenAI chat completions body; raise ``APIError`` naming the bad field."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_type")
    model = body.get("model", "edgecloud-auto")
    if model is not None and not isinstance(model, str):
        raise invalid("'model' must be a string.", "model", "invalid_type")
    route_name = settings.resolve_model_name(model)
    if route_name is None:
        raise model_not_found(str(model))
    req = ChatRequest(messages=[], model=model or "edgecloud-auto", route_name=route_name)

    messages = body.get("messages")
    if messages is None:
        raise invalid("'messages' is required.", "messages", "missing_required_parameter")
    if not isinstance(messages, list):
        raise invalid("'messages' must be a list.", "messages", "invalid_type")
    if not messages:
        raise invalid("'messages' must contain at least one message.", "messages", "empty_array")
    for i, raw in enumerate(messages):
        at = f"messages[{i}]"
        if not isinstance(raw, dict):
            raise invalid(f"'{at}' must be an object.", at, "invalid_type")
        role = raw.get("role")
        if role not in ROLES:
            raise invalid(
                f"'{at}.role' must be one of {', '.join(sorted(ROLES))}; got {role!r}.",
                f"{at}.role",
            )
        if role in ("tool", "function") or raw.get("tool_calls") or raw.get("function_call"):
            req.has_tools = True
        text = _content_text(raw.get("content"), f"{at}.content", req)
        req.messages.append(Message(role, text))
    if not any(m.content.strip() for m in req.messages if m.role in ("user", "system", "developer")):
        raise invalid("The messages hold no text: at least one non-empty message is needed.", "messages")

    limit = settings.edge.max_tokens_limit
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(f"'{name}' must be an integer.", name, "invalid_type")
        if not 1 <= value <= limit:
            raise invalid(f"'{name}' must be between 1 and {limit}, got {value}.", name)
        req.max_tokens = value
        break
    req.temperature = _number(body, "temperature", 0.0, 2.0, 0.7)
    req.top_p = _number(body, "top_p", 0.0, 1.0, 1.0)

    n = body.get("n", 1)
    if n is not None and (isinstance(n, bool) or not isinstance(n, int)):
        raise invalid("'n' must be an integer.", "n", "invalid_type")
    if n not in (None, 1):
        raise invalid("Only n=1 is supported: the gateway returns one choice per request.", "n")

    stop = body.get("stop")
    if isinstance(stop, str):
        req.stop = [stop] if stop else []
    elif isinstance(stop, list):
        if len(stop) > 4 or not all(isinstance(s, str) for s in stop):
            raise invalid("'stop' must be a string or a list of at most 4 strings.", "stop")
        req.stop = [s for s in stop if s]
    elif stop is not None:
        raise invalid("'stop' must be a string or a list of strings.", "stop", "invalid_type")

    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise invalid("'seed' must be an integer.", "seed", "invalid_type")
    req.seed = seed

    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise invalid("'stream' must be a boolean.", "stream", "invalid_type")
    req.stream = bool(stream)
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise invalid("'stream_options' must be an object.", "stream_options", "invalid_type")
        include = options.get("include_usage", False)
        if not isinstance(include, bool):
            raise invalid("'stream_options.include_usage' must be a boolean.", "stream_options.include_usage")
        req.include_usage = include

    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise invalid("'user' must be a string.", "user", "invalid_type")
    req.user = user

    if body.get("tools") or body.get("functions") or body.get("tool_choice") not in (None, "none"):
        req.has_tools = True
    response_format = body.get("response_format")
    if response_format is not None:
        if not isinstance(response_format, dict):
            raise invalid("'response_format' must be an object.", "response_format", "invalid_type")
        if response_format.get("type") in ("json_schema", "json_object"):
            req.has_schema = True
    # Forwarded as-is to a cloud provider; ignored by the edge.
    for name in ("tools", "tool_choice", "response_format", "functions", "parallel_tool_calls"):
        if name in body:
            req.extra.setdefault("passthrough", {})[name] = body[name]

    if headers:
        req.route_header = headers.get("x-edgecloud-route")
        req.scenario_header = headers.get("x-edgecloud-scenario")
        req.cache_control = headers.get("cache-control")
        req.cache_header = headers.get("x-edgecloud-cache")
        req.cache_admin = shows_admin_token(headers.get("authorization"), settings.server.admin_token)
    return req


def reject_for_edge(req: ChatRequest) -> None:
    """The edge model reads text only: refuse what it would silently drop."""
    if req.has_images:
        param = req.extra.get("non_text_params", ["messages"])[0]
        raise APIError(400, "The on-device model accepts text content only.", "invalid_request_error",
                       param, "unsupported_content")
    if req.has_tools:
        raise APIError(400, "The on-device model does not support tools or function calls.",
                       "invalid_request_error", "tools", "unsupported_parameter")
