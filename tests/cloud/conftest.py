"""Fixtures for the cloud bridge tests: real local servers standing in for the cloud."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bench.fake_cloud import FakeCloudHandle, run_fake_cloud_in_thread
from cloud_bridge import CloudConfig, ProviderConfig

FAST = {
    # Generous: the machine is shared and slow; tests that need a short limit set it themselves.
    "connect_timeout_s": 5.0,
    "ttft_timeout_s": 5.0,
    "max_gap_s": 5.0,
    "total_timeout_s": 10.0,
    "backoff_base_s": 0.01,
    "backoff_max_s": 0.05,
    "keep_warm_interval_s": 60.0,
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def _fake_server() -> Iterator[FakeCloudHandle]:
    handle = run_fake_cloud_in_thread()
    yield handle
    handle.stop()


@pytest.fixture
def fake(_fake_server: FakeCloudHandle) -> FakeCloudHandle:
    """An HTTP/1.1 fake cloud (uvicorn), reset to defaults for each test."""
    _fake_server.reset()
    return _fake_server


@pytest.fixture(scope="module")
def _fake_h2_server() -> Iterator[FakeCloudHandle]:
    handle = run_fake_cloud_in_thread(http2_tls=True)
    yield handle
    handle.stop()


@pytest.fixture
def fake_h2(_fake_h2_server: FakeCloudHandle) -> FakeCloudHandle:
    """An HTTP/2-over-TLS fake cloud (hypercorn, trustme certificate), reset for each test."""
    _fake_h2_server.reset()
    return _fake_h2_server


def provider(handle: FakeCloudHandle | None = None, name: str = "a", base_url: str | None = None,
             **overrides: Any) -> ProviderConfig:
    """A provider pointed at a fake, with test-sized timeouts and back-off."""
    fields: dict[str, Any] = {**FAST, **overrides}
    if handle is not None and handle.ca_file:
        fields.setdefault("verify_tls", handle.ca_file)
    url = base_url if base_url is not None else (handle.base_url if handle else "")
    return ProviderConfig(name=name, base_url=url, **fields)


def cloud(*providers: ProviderConfig, **overrides: Any) -> CloudConfig:
    fields: dict[str, Any] = {"warmup": False, "keep_warm": False, **overrides}
    return CloudConfig(providers=list(providers), **fields)
