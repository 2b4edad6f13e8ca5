"""Admin endpoints of venue knowledge: status, loading a pack, and trying retrieval.

Behind the app's ``require_admin`` (bearer token, constant-time compare). Parsing and indexing
run in a worker thread: a 10,000-fact pack takes a second to index, and kiosks keep being
answered meanwhile. A refused pack answers 400 with the file and line at fault, and the pack that
was active stays active.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request

from edge.errors import APIError, invalid, unavailable
from models.knowledge_pack import MAX_PACK_BYTES

from .service import KnowledgeBase

_MARKDOWN_TYPES = ("text/markdown", "text/x-markdown")  # edge/http_guard.py lets these through here


def knowledge_admin_router(
    get_base: Callable[[], KnowledgeBase | None], require_admin: Callable[..., Any]
) -> APIRouter:
    """``GET /admin/knowledge``, ``POST /admin/knowledge``, ``GET /admin/knowledge/search``."""
    router = APIRouter(prefix="/admin/knowledge", tags=["admin"], dependencies=[Depends(require_admin)])

    def base_or_503() -> KnowledgeBase:
        base = get_base()
        if base is None:
            raise unavailable("Venue knowledge is disabled ([knowledge] enabled = false).", code="knowledge_disabled")
        return base

    @router.get("")
    async def status() -> dict[str, Any]:
        return base_or_503().status()

    @router.post("")
    async def load(request: Request) -> dict[str, Any]:
        """Body: the pack (JSON, or Markdown with ``content-type: text/markdown``), or
        ``{"path": "/etc/edgecloud/venue.md"}`` for a file on the kiosk."""
        base = base_or_503()
        body = await request.body()
        if len(body) > MAX_PACK_BYTES:
            raise APIError(413, "The knowledge pack is too large.", "invalid_request_error", None, "pack_too_large")
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        source = request.query_params.get("name") or "upload"
        try:
            if content_type in _MARKDOWN_TYPES:
                active = await asyncio.to_thread(base.load_bytes, body, "markdown", source)
            else:
                doc = _json_or_none(body)
                if isinstance(doc, dict) and set(doc) == {"path"}:
                    active = await asyncio.to_thread(base.load_path, Path(str(doc["path"])))
                else:
                    active = await asyncio.to_thread(base.load_bytes, body, "json", source)
        except ValueError as exc:
            base.last_error = str(exc)
            raise invalid(str(exc), param=None, code="invalid_knowledge_pack") from exc
        pack = active.pack
        return {"loaded": len(pack.facts), "name": pack.name, "version": pack.pack_version,
                "pack_version": pack.version, "knowledge_version": active.knowledge_version,
                "faq_entries": len(pack.faq_entries()), "index_ms": round(active.index.build_ms, 1)}

    @router.get("/search")
    async def search(q: str, k: int | None = None) -> dict[str, Any]:
        base = base_or_503()
        if not q.strip():
            raise invalid("The query 'q' is empty.", param="q", code="invalid_query")
        if k is not None and not 1 <= k <= 20:
            raise invalid("'k' must be between 1 and 20.", param="k", code="invalid_query")
        evidence = base.evidence(q)
        out: dict[str, Any] = {"query": q, "passages": base.search(q, k)}
        if evidence is not None:
            out["evidence"] = {k_: v for k_, v in evidence.as_dict().items() if k_ != "passages"}
        return out

    return router


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None  # the pack parser reports the line at fault


__all__ = ["knowledge_admin_router"]
