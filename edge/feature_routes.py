"""The feature modules' HTTP routes, mounted on the app: cache admin, knowledge admin,
observability (metrics, dashboard) and fleet updates.

Each router reads its part from ``app.state.services`` at request time, so routes exist from the
start and answer 503 (or their own "not configured" error) while a part is turned off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

if TYPE_CHECKING:
    from .services import Services


def mount_feature_routes(app: FastAPI, require_admin: Any) -> None:
    """Include every feature router; admin routes sit behind ``require_admin``."""

    def services() -> Services:
        return app.state.services

    from .cache import cache_admin_router
    from .knowledge.admin import knowledge_admin_router
    from .observability import observability_router
    from .update_routes import update_router

    app.include_router(cache_admin_router(lambda: services().cache, require_admin))
    app.include_router(knowledge_admin_router(lambda: services().knowledge, require_admin))
    app.include_router(observability_router(lambda: services().obs))
    app.include_router(update_router(lambda: services().agent, require_admin))
