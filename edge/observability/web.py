"""HTTP face of observability: ``/metrics`` for Prometheus, the dashboard and its JSON feed.

The dashboard is three static files shipped in this package (no build step, nothing from the
internet) served with a strict Content-Security-Policy; it draws its charts in SVG from
``/dashboard/data``, which it polls for live refresh.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from ..admin_auth import shows_admin_token
from ..disclosure import public_update_status

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
    async def dashboard_data(request: Request) -> Response:
        obs = get_obs()
        if obs is None:
            return _unavailable()
        data = obs.dashboard_data()
        if not shows_admin_token(request.headers.get("authorization"), obs.settings.server.admin_token):
            data["update"] = public_update_status(data.get("update") or {})  # edge/disclosure.py
        return JSONResponse(data, headers={"Cache-Control": "no-store"})

    @router.get("/dashboard/assets/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        if name not in assets:
            return _not_found(name)
        return Response(assets[name], media_type=ASSETS[name], headers=_SECURITY_HEADERS)

    return router
