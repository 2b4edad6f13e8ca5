"""Shared helpers for the observability tests: settings, known traffic, a real uvicorn server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from edge.config import Settings
from edge.records import RequestRecord

API_KEY = "sk-test-DO-NOT-LOG-4f9a8b7c6d5e"
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, a minute boundary


def make_settings(data_dir: Path, **metrics: Any) -> Settings:
    return Settings.model_validate({
        "server": {"data_dir": str(data_dir)},
        "cloud": {"providers": [{
            "name": "acme", "base_url": "http://127.0.0.1:9", "api_key": API_KEY,
            "price_input_per_mtok": 2.0, "price_output_per_mtok": 8.0,
        }]},
        "metrics": {"tegrastats_cmd": ["edgecloud-no-such-tegrastats"], **metrics},
    })


def record(rid: str, at: float, route: str, **kw: Any) -> RequestRecord:
    return RequestRecord(request_id=rid, started_at=at, route=route, **kw)


@dataclass
class CallRecord:
    """Stand-in with the attributes cloud_bridge's CallRecord carries (the bridge's own is not built here)."""

    provider: str
    ok: bool
    status: int | None
    error_kind: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    retried: bool = False
    was_429: bool = False
    breaker_state: str = "closed"
    request_id: str = ""
    ended_at: float | None = None


def metric_values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a /metrics body, keyed by (sample name, sorted labels)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(values: dict, name: str, **labels: str) -> float:
    return values.get((name, tuple(sorted(labels.items()))), 0.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """Run ``app`` under uvicorn on 127.0.0.1 in a thread; yields the base URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
