"""HTTP face of observability: ``/metrics`` for Prometheus, the dashboard and its JSON feed.

The dashboard is three static files shipped in this package (no build step, nothing from the
internet) served with a strict Content-Security-Policy; it draws its charts in SVG from
``/dashboard/data``, which it polls for live refresh. :func:`dashboard_data` builds that feed from
the ``Observability`` object's counters and minutes; the object itself only counts and rolls up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from ..admin_auth import shows_admin_token
from ..disclosure import public_update_status
from .cost import REJECTED, ROUTES, UsageTotals
from .metrics import flatten_update_status, safe_call
from .sla import MINUTE_S, minute_of, rollup

if TYPE_CHECKING:
    from .core import Observability

ASSETS = {"dashboard.js": "text/javascript; charset=utf-8", "dashboard.css": "text/css; charset=utf-8"}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath(name).read_bytes()


def _unavailable() -> JSONResponse:
    body = {
        "error": {
            "message": "Observability is not running.",
            "type": "server_error",
            "param": None,
            "code": "observability_unavailable",
        }
    }
    return JSONResponse(body, status_code=503)


def _not_found(name: str) -> JSONResponse:
    body = {
        "error": {
            "message": f"No dashboard asset named {name!r}.",
            "type": "invalid_request_error",
            "param": None,
            "code": "not_found",
        }
    }
    return JSONResponse(body, status_code=404)


def knowledge_summary(status: dict[str, Any] | None) -> dict[str, Any] | None:
    """The dashboard's venue-knowledge card: the pack's version, hit ratio and the operator's
    to-do list (uncovered venue questions, already scrubbed and thresholded by the service)."""
    if not status:
        return None
    return {k: status.get(k) for k in ("loaded", "mode", "name", "version", "pack_version", "facts",
                                       "hit_ratio", "lookups", "uncovered", "last_error")}


def dashboard_data(obs: Observability) -> dict[str, Any]:
    """Everything the dashboard draws, from the same counters and minutes as /metrics and the SLA."""
    now = time.time()
    src = obs.sources
    rows = {(r.minute, r.scope, r.name): r for r in obs.monitor.recent.values()}
    for r in obs.monitor.open_rows():
        key = (r.minute, r.scope, r.name)
        rows[key] = rows[key].merge(r) if key in rows else r
    oldest = minute_of(now) - (obs.monitor.recent_minutes - 1) * MINUTE_S
    series: dict[str, list[dict[str, Any]]] = {r: [] for r in ROUTES}
    providers: dict[str, list[dict[str, Any]]] = {}
    for (minute, scope, name), r in sorted(rows.items()):
        if minute < oldest:
            continue
        point = {
            "minute": minute,
            "requests": r.requests,
            "p50": r.ttft_p50_ms,
            "p95": r.ttft_p95_ms,
            "p99": r.ttft_p99_ms,
            "availability": r.availability,
        }
        if scope == "route":
            series.setdefault(name, []).append(point)
        else:
            providers.setdefault(name, []).append(point)
    hour = {r: sum(p["requests"] for p in pts) for r, pts in series.items()}
    totals = {k: obs.totals.get(k, UsageTotals()) for k in (*ROUTES, REJECTED)}
    hits = sum(u.cache_hits for u in totals.values())
    misses = sum(u.cache_misses for u in totals.values())
    saved = sum(u.avoided_usd for u in totals.values())
    spent = sum(u.cost_usd for u in totals.values())
    all_ttft, _ = rollup(r for r in rows.values() if r.scope == "route" and r.minute >= oldest)
    update = safe_call(src.update_status, {})
    return {
        "generated_at": now,
        "started_at": obs.started_at,
        "window_minutes": obs.monitor.recent_minutes,
        "route_mix": {r: totals[r].requests for r in ROUTES},
        "route_mix_last_hour": hour,
        "requests": {
            "total": sum(u.requests for u in totals.values()),
            "rejected": totals[REJECTED].requests,
            "errors": sum(u.errors for u in totals.values()),
        },
        "ttft": series,
        "ttft_last_hour": {"p50": all_ttft.quantile(50), "p99": all_ttft.quantile(99)},
        "providers": providers,
        "cache": {
            "hits": hits,
            "misses": misses,
            "hit_ratio": hits / (hits + misses) if hits + misses else 0.0,
        },
        "money": {
            "currency": "USD",
            "saved_usd": saved,
            "cloud_cost_usd": spent,
            "all_cloud_usd": saved + spent,
            "reference_provider": obs.prices.reference_name,
        },
        "model": {
            "version": safe_call(src.installed_version, None),
            "loaded": bool(safe_call(src.model_loaded, False)),
            "queue_depth": int(safe_call(src.queue_depth, 0)),
        },
        "update": obs.redact.clean(flatten_update_status(update)),
        "breakers": obs.breaker_states(),
        "device": obs.device.snapshot.to_dict(),
        "breaches": [b.to_dict() for b in reversed(obs.monitor.recent_breaches)][:20],
        "knowledge": knowledge_summary(safe_call(src.knowledge_status, None)),
    }


def observability_router(get_obs: Callable[[], Observability | None]) -> APIRouter:
    """``GET /metrics``, ``GET /dashboard``, ``GET /dashboard/data``, assets, and ``GET /`` -> dashboard."""
    router = APIRouter()
    page = _asset("dashboard.html")
    assets = {name: _asset(name) for name in ASSETS}

    @router.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        obs = get_obs()
        if obs is None:
            return _unavailable()
        body, content_type = obs.render_metrics()
        return Response(body, media_type=content_type, headers={"Cache-Control": "no-store"})

    @router.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/dashboard", status_code=307)

    @router.get("/dashboard", include_in_schema=False)
    async def dashboard() -> HTMLResponse:
        return HTMLResponse(page, headers=_SECURITY_HEADERS)

    @router.get("/dashboard/data", include_in_schema=False)
    async def dashboard_feed(request: Request) -> Response:
        obs = get_obs()
        if obs is None:
            return _unavailable()
        data = dashboard_data(obs)
        if not shows_admin_token(request.headers.get("authorization"), obs.settings.server.admin_token):
            data["update"] = public_update_status(data.get("update") or {})  # edge/disclosure.py
        return JSONResponse(data, headers={"Cache-Control": "no-store"})

    @router.get("/dashboard/assets/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        if name not in assets:
            return _not_found(name)
        return Response(assets[name], media_type=ASSETS[name], headers=_SECURITY_HEADERS)

    return router
