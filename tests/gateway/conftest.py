"""Fixtures shared by the gateway tests that need a cloud: one real local fake cloud per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.fake_cloud import FakeCloudConfig, FakeCloudHandle, run_fake_cloud_in_thread


@pytest.fixture(scope="module")
def cloud() -> Iterator[FakeCloudHandle]:
    handle = run_fake_cloud_in_thread(FakeCloudConfig())
    yield handle
    handle.stop()


@pytest.fixture
def fake(cloud: FakeCloudHandle) -> FakeCloudHandle:
    """The module's fake cloud with its faults and counters reset for this test."""
    cloud.reset()
    return cloud
