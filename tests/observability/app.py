"""A small FastAPI app for the HTTP tests: the observability router plus a traffic endpoint.

The gateway's own app is ``edge.app``; this one only hosts what the observability package serves,
with an endpoint that turns a posted JSON record into a finished request, inside the server's
event loop exactly as the pipeline would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from edge.config import Settings
from edge.observability import Observability, observability_router
from edge.records import RequestRecord


def build_app(settings: Settings, with_obs: bool = True) -> FastAPI:
    state: dict[str, Observability | None] = {"obs": None}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if with_obs:
            obs = Observability(settings)
            obs.bind_state(
                queue_depth=lambda: 1, model_loaded=lambda: True,
                breaker_states=lambda: {"acme": "closed"},
                update_status=lambda: {"state": "idle", "last_result": "installed"},
                installed_version=lambda: "smollm2-135m@2026.01.1",
            )
            await obs.start()
            state["obs"] = obs
        try:
            yield
        finally:
            if state["obs"] is not None:
                await state["obs"].aclose()

    app = FastAPI(lifespan=lifespan)
    app.include_router(observability_router(lambda: state["obs"]))

    @app.post("/_test/requests")
    async def record(body: list[dict[str, Any]]) -> dict[str, int]:
        obs = state["obs"]
        assert obs is not None
        for item in body:
            obs.observe_request(RequestRecord(**item))
        return {"recorded": len(body)}

    @app.post("/_test/flush")
    async def flush() -> dict[str, int]:
        obs = state["obs"]
        assert obs is not None
        return {"rows": len(await obs.flush())}

    return app
