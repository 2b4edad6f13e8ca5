"""Admin endpoints of the answer cache: stats, purge, and loading an FAQ pack.

Every route sits behind the ``require_admin`` dependency the app provides (bearer token compared
in constant time). The work itself (SQLite scans, pack parsing) runs in a worker thread so an
operator purging a large cache never stalls the kiosks' requests on the event loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from edge.cache.answer_cache import AnswerCache
from edge.errors import APIError, invalid, unavailable
from models.faq import MAX_PACK_BYTES, parse_faq_pack


class PurgeRequest(BaseModel):
    """Empty body: purge every answer. ``prefix`` matches a normalised question or a key."""

    prefix: str | None = None
    knowledge_version: str | None = None
    faq: bool = False


def cache_admin_router(
    get_cache: Callable[[], AnswerCache | None], require_admin: Callable[..., Any]
) -> APIRouter:
    """``GET /admin/cache/stats``, ``POST /admin/cache/purge``, ``POST /admin/cache/faq``."""
    router = APIRouter(prefix="/admin/cache", tags=["admin"], dependencies=[Depends(require_admin)])

    def cache_or_503() -> AnswerCache:
        cache = get_cache()
        if cache is None:
            raise unavailable("The answer cache is disabled or unavailable.", code="cache_disabled")
        return cache

    @router.get("/stats")
    async def stats() -> dict[str, Any]:
        cache = cache_or_503()
        return await asyncio.to_thread(cache.stats)

    @router.post("/purge")
    async def purge(request: Request) -> dict[str, Any]:
        cache = cache_or_503()
        body = await request.body()
        try:
            spec = PurgeRequest.model_validate_json(body) if body.strip() else PurgeRequest()
        except ValueError as exc:
            raise invalid(f"Invalid purge request: {exc}", code="invalid_purge") from exc
        removed = await asyncio.to_thread(
            cache.purge, spec.prefix, spec.knowledge_version, faq=spec.faq
        )
        return {"purged": removed, "prefix": spec.prefix, "knowledge_version": spec.knowledge_version}

    @router.post("/faq")
    async def load_faq(request: Request) -> dict[str, Any]:
        """Body: ``{"path": "/etc/edgecloud/faq.json"}`` (a file on the kiosk), or the pack itself
        (JSON, or CSV with ``content-type: text/csv``); ``?name=`` names an uploaded pack so a later
        upload with the same name replaces it."""
        cache = cache_or_503()
        body = await request.body()
        if len(body) > MAX_PACK_BYTES:
            raise APIError(413, "The FAQ pack is too large.", "invalid_request_error", None, "pack_too_large")
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        name = request.query_params.get("name") or "upload"
        try:
            if content_type in ("text/csv", "application/csv"):
                entries = parse_faq_pack(body, "csv", source=name)
                count = await asyncio.to_thread(cache.load_faq_entries, entries, name)
            else:
                doc = _json_body(body)
                if isinstance(doc, dict) and set(doc) == {"path"}:
                    path = Path(str(doc["path"]))
                    count = await asyncio.to_thread(cache.load_faq, path)
                    name = path.name
                else:
                    entries = parse_faq_pack(body, "json", source=name)
                    count = await asyncio.to_thread(cache.load_faq_entries, entries, name)
        except ValueError as exc:
            raise invalid(str(exc), param=None, code="invalid_faq_pack") from exc
        return {"loaded": count, "source": name}

    return router


def _json_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the body is not JSON ({exc})") from exc


__all__ = ["PurgeRequest", "cache_admin_router"]
