"""One JSON line per request on the ``edgecloud.request`` logger.

Fields are listed explicitly (never "dump the record"), so a field added to ``RequestRecord``
later cannot leak into the logs by accident. Prompt text appears only when the operator turned
``logging.log_prompts`` on, and every string passes through a ``Redactor`` that removes the
configured API keys and anything shaped like a credential (``cloud_bridge.redact``, the project's
one redactor), so a key can never reach a log even if an upstream error message echoes it.
"""

from __future__ import annotations

import logging
from typing import Any

from cloud_bridge.redact import Redactor
from edge.records import RequestRecord

REQUEST_LOGGER = "edgecloud.request"

_LOG_FIELDS = (
    "request_id",
    "route",
    "reason",
    "outcome",
    "status",
    "error_code",
    "stream",
    "provider",
    "model",
    "requested_model",
    "scenario",
    "label",
    "confidence",
    "degraded",
    "cache",
    "ttft_ms",
    "total_ms",
    "queue_ms",
    "prefill_ms",
    "prompt_tokens",
    "completion_tokens",
    "tokens_per_s",
    "hedged",
    "fallback",
    "early_start",
    "early_dropped",
)


def _round(value: Any) -> Any:
    return round(value, 2) if isinstance(value, float) else value


def request_log_payload(rec: RequestRecord, *, log_prompts: bool, redact: Redactor) -> dict[str, Any]:
    """The fields of one log line, every string redacted."""
    payload: dict[str, Any] = {"event": "request", "ts_start": round(rec.started_at, 3)}
    for name in _LOG_FIELDS:
        value = getattr(rec, name)
        if value is None or value == "":
            continue
        if isinstance(value, str):
            value = redact(value)
        elif isinstance(value, float):
            value = round(value, 2)
        payload[name] = value
    if rec.timings:
        payload["timings"] = {
            str(k): _round(v) for k, v in rec.timings.items() if isinstance(v, (int, float))
        }
    if log_prompts and rec.prompt:
        payload["prompt"] = redact(rec.prompt)
    return payload


def _summary(p: dict[str, Any]) -> str:
    """The human-readable message, for text logs; JSON logs carry the fields themselves."""
    parts = [
        f"request {p.get('request_id', '-')}",
        p.get("route") or "-",
        p.get("outcome", "ok"),
        str(p.get("status", "")),
    ]
    for key in ("ttft_ms", "total_ms"):
        if key in p:
            parts.append(f"{key}={p[key]}")
    return " ".join(parts)


def emit_request_log(
    logger: logging.Logger, rec: RequestRecord, *, log_prompts: bool, redact: Redactor
) -> None:
    """One record on ``edgecloud.request`` whose ``extra`` holds the fields (one JSON line with
    ``edge.logs.JsonFormatter``); no work at all when the logger would drop INFO.
    """
    if not logger.isEnabledFor(logging.INFO):
        return
    payload = request_log_payload(rec, log_prompts=log_prompts, redact=redact)
    logger.info(_summary(payload), extra=payload)
