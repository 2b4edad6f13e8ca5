"""Activation: smoke test, hot swap with a real llama.cpp model, health check and automatic rollback,
and the admin endpoints on a real uvicorn server."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from bench.local_run import free_port
from edge.errors import APIError
from edge.update_routes import update_router
from models.fleet.agent import UpdateAgent
from models.store import InstalledVersion

from .conftest import Operator, RecordingActivator, make_agent, run_cycle
from .rangeserver import RangeServer


class LlamaActivator:
    """What the gateway does, minus the HTTP: load the new GGUF in a thread while the old model keeps
    answering, swap the reference, and check that the new one generates."""

    def __init__(self) -> None:
        self.llm = None
        self.version: int | None = None
        self.answers_during_swap: list[str] = []

    def _load(self, path: Path):
        from models.llama_runtime import open_llama

        return open_llama(path, n_ctx=128, n_threads=1, verbose=False)

    async def activate(self, version: InstalledVersion) -> None:
        gguf = version.artifacts.get("gguf")
        if gguf is None:
            self.version = version.version
            return
        loading = asyncio.create_task(asyncio.to_thread(self._load, gguf))
        while not loading.done() and self.llm is not None:  # the old model keeps serving meanwhile
            self.answers_during_swap.append(await asyncio.to_thread(self._generate))
        self.llm = await loading
        self.version = version.version

    def _generate(self) -> str:
        assert self.llm is not None
        return self.llm.create_completion("Hello", max_tokens=1, temperature=0.0)["choices"][0]["text"]

    async def health_check(self) -> bool:
        if self.llm is None:
            return True
        return isinstance(await asyncio.to_thread(self._generate), str)


@pytest.mark.slow
def test_update_with_real_gguf_hot_swap(
    operator: Operator, server: RangeServer, tmp_path: Path, embedded_model: Path
) -> None:
    activator = LlamaActivator()
    operator.release(1, gguf=embedded_model)
    agent = make_agent(operator, server, tmp_path / "device", activator=activator)
    result = run_cycle(agent)
    assert result.status == "updated", result
    assert "generated" in result.smoke["gguf"]
    assert activator.version == 1 and activator.llm is not None
    operator.release(2, gguf=embedded_model)
    result = run_cycle(agent)
    assert result.status == "updated", result
    assert activator.version == 2
    current = agent.store.current()
    assert current is not None and current.artifacts["gguf"].stat().st_size == embedded_model.stat().st_size
    assert all(isinstance(a, str) for a in activator.answers_during_swap)


def test_failed_smoke_test_stays_on_old(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    operator.release(1)
    agent = make_agent(operator, server, tmp_path / "device", activator=RecordingActivator())
    assert run_cycle(agent).status == "updated"
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGUF" + bytes(range(256)) * 64)  # signed by the operator, but not a usable model
    operator.release(2, gguf=bad)
    result = run_cycle(agent)
    assert result.status == "failed" and result.error_type == "SmokeTestFailed"
    assert "gguf" in result.reason
    assert agent.store.current_version() == 1
    assert agent.store.installed_versions() == [1]
    assert agent.activator.activated == [1]  # never activated
    assert run_cycle(agent).status == "skipped"  # a failed version is not retried every hour


@pytest.mark.parametrize("mode", ["health", "activate"])
def test_post_activation_failure_rolls_back(
    mode: str, operator: Operator, server: RangeServer, tmp_path: Path
) -> None:
    activator = RecordingActivator(unhealthy=2) if mode == "health" else RecordingActivator(fail_activate=2)
    operator.release(1)
    agent = make_agent(operator, server, tmp_path / "device", activator=activator)
    assert run_cycle(agent).status == "updated"
    operator.release(2)
    result = run_cycle(agent)
    assert result.status == "rolled_back"
    assert ("health check" in result.reason) if mode == "health" else ("did not load" in result.reason)
    assert activator.activated == [1, 2, 1]  # swapped back to the old version
    assert agent.store.current_version() == 1
    assert agent.store.installed_versions() == [1]
    assert agent.store.journal()[-1]["event"] == "rejected"
    status = agent.status()
    assert status["installed"]["version"] == 1 and status["last_error"] == result.reason
    operator.release(3)
    assert run_cycle(agent).status == "updated"  # the next good version goes through
    assert agent.store.current_version() == 3 and agent.store.previous_version() == 1


class BlockingActivator(RecordingActivator):
    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    async def activate(self, version: InstalledVersion) -> None:
        await asyncio.to_thread(self.release.wait, 60)
        await super().activate(version)


@pytest.fixture
def admin_app(operator: Operator, server: RangeServer, tmp_path: Path) -> Iterator[tuple[str, UpdateAgent]]:
    activator = BlockingActivator()
    holder: dict[str, UpdateAgent] = {}
    token = "test-admin-token"

    async def require_admin(request: Request) -> None:
        import hmac

        given = request.headers.get("authorization", "").removeprefix("Bearer ")
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise APIError(401, "Missing or invalid admin token.", "authentication_error", None, "invalid_admin_token")

    app = FastAPI()

    @app.exception_handler(APIError)
    async def _err(request: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.on_event("startup")
    async def _start() -> None:
        holder["agent"] = make_agent(operator, server, tmp_path / "device", activator=activator)

    app.include_router(update_router(lambda: holder.get("agent"), require_admin))
    port = free_port()
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    while not uv.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", holder["agent"]
    finally:
        activator.release.set()
        uv.should_exit = True
        thread.join(10)


def test_admin_update_and_status(admin_app: tuple[str, UpdateAgent], operator: Operator) -> None:
    base, agent = admin_app
    operator.release(1)
    auth = {"Authorization": "Bearer test-admin-token"}
    with httpx.Client(base_url=base, timeout=30) as client:
        denied = client.post("/admin/update")
        assert denied.status_code == 401
        assert denied.json()["error"]["code"] == "invalid_admin_token"
        assert client.post("/admin/update", headers=auth).status_code == 202
        busy = client.post("/admin/update", headers=auth)
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "update_in_progress"
        agent.activator.release.set()
        status = client.get("/admin/status", headers=auth).json()
        for _ in range(500):
            if status["state"] == "idle" and status["last_result"]:
                break
            time.sleep(0.05)
            status = client.get("/admin/status", headers=auth).json()
        assert status["last_result"]["status"] == "updated"
        assert status["installed"]["version"] == 1
        assert status["progress"]["bytes_done"] == status["progress"]["bytes_total"] > 0
        assert "token" not in str(status)
