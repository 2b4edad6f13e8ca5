"""Admin endpoints for fleet model updates: ``POST /admin/update`` and ``GET /admin/status``.

The update agent lives in the gateway process (so activation can hot-swap the running model); these
routes only start a cycle and report state. A cycle can take minutes (multi-GB download, smoke test),
so ``POST`` answers ``202`` at once and the operator polls ``GET /admin/status`` for progress.
Both routes sit behind ``require_admin`` (bearer token, constant-time compare) from the app.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from edge.errors import APIError

if TYPE_CHECKING:  # the agent (tuf, its crypto) is imported only where updates are turned on
    from models.fleet.agent import UpdateAgent


def _no_agent() -> APIError:
    return APIError(
        503,
        "Model updates are not configured on this gateway (no repository / trusted root).",
        "server_error",
        None,
        "updates_disabled",
    )


def update_router(get_agent: Callable[[], UpdateAgent | None], require_admin: Callable[..., Any]) -> APIRouter:
    """Build the router; ``get_agent`` reads the agent from the app state at request time."""
    router = APIRouter(tags=["admin"], dependencies=[Depends(require_admin)])

    @router.post("/admin/update", status_code=202)
    async def start_update() -> JSONResponse:
        agent = get_agent()
        if agent is None:
            raise _no_agent()
        if not agent.trigger():
            raise APIError(409, "An update check is already running; see GET /admin/status.",
                           "invalid_request_error", None, "update_in_progress")
        return JSONResponse({"status": "started", "state": agent.state}, status_code=202)

    @router.get("/admin/status")
    async def update_status() -> dict[str, Any]:
        agent = get_agent()
        if agent is None:
            raise _no_agent()
        return agent.status()

    return router
