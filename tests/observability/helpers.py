"""Shared helpers for the observability tests: settings, known traffic, a real uvicorn server."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from bench.local_run import free_port
from cloud_bridge.client import CallRecord
from cloud_bridge.timings import CallTimings
from edge.config import Settings
from edge.records import RequestRecord

API_KEY = "sk-test-DO-NOT-LOG-4f9a8b7c6d5e"
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, a minute boundary


def make_settings(data_dir: Path, **metrics: Any) -> Settings:
    return Settings.model_validate(
        {
            "server": {"data_dir": str(data_dir)},
            "cloud": {
                "providers": [
                    {
                        "name": "acme",
                        "base_url": "http://127.0.0.1:9",
                        "api_key": API_KEY,
                        "price_input_per_mtok": 2.0,
                        "price_output_per_mtok": 8.0,
                    }
                ]
            },
            "metrics": {"tegrastats_cmd": ["edgecloud-no-such-tegrastats"], **metrics},
        }
    )


def record(rid: str, at: float, route: str, **kw: Any) -> RequestRecord:
    return RequestRecord(request_id=rid, started_at=at, route=route, **kw)


def call(
    provider: str = "acme",
    *,
    ok: bool = True,
    status: int | None = 200,
    kind: str | None = None,
    dns: float | None = None,
    connect: float | None = None,
    tls: float | None = None,
    first_byte: float | None = 100.0,
    total: float = 500.0,
    attempt_start: float = 0.0,
    retried: bool = False,
    breaker: str = "closed",
    rid: str = "",
    logical: bool = False,
    cancelled: bool = False,
) -> CallRecord:
    """A real ``cloud_bridge`` CallRecord for one attempt; phase durations in ms, stacked into offsets."""
    t = CallTimings(attempts=1, attempt_start_ms=attempt_start)
    offset = attempt_start
    for name, duration in (("dns_ms", dns), ("connect_ms", connect), ("tls_ms", tls)):
        if duration is not None:
            offset += duration
            setattr(t, name, offset)
    t.request_sent_ms = offset
    if first_byte is not None:
        t.first_byte_ms = t.first_token_ms = offset + first_byte
    t.total_ms = attempt_start + total
    return CallRecord(
        provider=provider,
        ok=ok,
        status=status,
        error_kind=kind,
        timings=t,
        retried=retried,
        was_429=status == 429,
        breaker_state=breaker,
        request_id=rid,
        logical=logical,
        cancelled=cancelled,
    )


def metric_values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a /metrics body, keyed by (sample name, sorted labels)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(values: dict, name: str, **labels: str) -> float:
    return values.get((name, tuple(sorted(labels.items()))), 0.0)


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
