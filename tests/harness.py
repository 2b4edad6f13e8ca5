"""A real gateway for tests: uvicorn on a free 127.0.0.1 port, in a thread of the test process.

The server is the same ``create_app`` + uvicorn that ``edgecloud serve`` runs; keeping it in the
test process lets a test look at the gateway's own state (``handle.services``) as well as drive it
over HTTP with the official ``openai`` client.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from bench.local_run import free_port
from edge.app import create_app
from edge.config import ENV_PREFIX, Settings
from edge.limits import guarded_protocol


@dataclass
class GatewayHandle:
    base_url: str
    app: Any
    server: uvicorn.Server
    thread: threading.Thread
    settings: Settings

    @property
    def services(self) -> Any:
        return self.app.state.services

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def openai(self, **kwargs: Any) -> Any:
        import openai

        return openai.OpenAI(base_url=self.base_url + "/v1", api_key="kiosk-key-not-used", max_retries=0,
                             timeout=kwargs.pop("timeout", 60.0), **kwargs)

    def call(self, coro: Any, timeout: float = 30.0) -> Any:
        """Run a coroutine on the server's event loop (to inspect or poke its state)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


# Set by tests/conftest.py when pytest-xdist runs several workers: each llama.cpp context then gets its
# share of the cores instead of all of them (see ``worker_threads``). It is the product's own
# ``[edge] n_threads`` override, so gateways the tests start as subprocesses take the share too.
THREADS_ENV = f"{ENV_PREFIX}EDGE_N_THREADS"


def worker_threads() -> int | None:
    """The llama.cpp threads one test worker may use; None when the suite runs in one process.

    Two workers that each give llama.cpp every core put twice as many OpenMP threads as cores on the
    machine: libgomp's barriers then wait out scheduler slices at every graph node, and the embedded
    model's decode falls from ~100 tokens/s to under 1 (seen: 8 tokens in 11 s), which no timing
    bound in the suite survives. One share of the cores per worker keeps each worker's decode steady.
    """
    raw = os.environ.get(THREADS_ENV, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def make_settings(tmp: Path, **sections: dict[str, Any]) -> Settings:
    tree: dict[str, Any] = {"server": {"data_dir": str(tmp), "port": 0}}
    for name, values in sections.items():
        if isinstance(values, dict) and isinstance(tree.get(name), dict):
            tree[name].update(values)
        else:
            tree[name] = values
    return Settings.model_validate(tree)


@contextmanager
def run_gateway(settings: Settings, wait_ready: bool = True, ready_timeout: float = 60.0) -> Iterator[GatewayHandle]:
    port = free_port()
    settings = settings.model_copy(update={"server": settings.server.model_copy(update={"port": port})})
    app = create_app(settings)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False,
                            http=guarded_protocol(settings.server.header_timeout_s),
                            timeout_keep_alive=settings.server.timeout_keep_alive_s,
                            h11_max_incomplete_event_size=settings.server.h11_max_incomplete_event_size)
    server = uvicorn.Server(config)
    holder: dict[str, Any] = {}

    def serve() -> None:
        loop = asyncio.new_event_loop()
        holder["loop"] = loop
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.serve())
        loop.close()

    thread = threading.Thread(target=serve, name=f"gateway-{port}", daemon=True)
    thread.start()
    handle = GatewayHandle(f"http://127.0.0.1:{port}", app, server, thread, settings)
    deadline = time.monotonic() + ready_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("gateway did not start")
        time.sleep(0.02)
    handle._loop = holder["loop"]  # type: ignore[attr-defined]
    if wait_ready:
        while True:
            try:
                r = httpx.get(handle.base_url + "/readyz", timeout=5)
                if r.status_code == 200 and handle.services.loaded.is_set():
                    break
                if r.status_code == 503 and r.json().get("status") == "failed":
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("gateway not ready in time")
            time.sleep(0.05)
    try:
        yield handle
    finally:
        handle.stop()


async def edge_answer(edge: Any, text: str, **fields: Any) -> tuple[str, Any]:
    """One user question straight to a ``LocalModel`` (no HTTP): the answer's text and its ``Finish``."""
    from edge.types import ChatRequest, Finish, Message, TextDelta

    parts = []
    async for event in edge.generate(ChatRequest(messages=[Message("user", text)], **fields)):
        if isinstance(event, TextDelta):
            parts.append(event.text)
    assert isinstance(event, Finish)
    return "".join(parts), event
