"""Fixtures of the reliability suite. The fault matrix its tests fill is printed by ``tests/conftest.py``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from reliability.support import (
    BODY_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    MATRIX_KEY,
    PROC_SECRETS,
    SUITE_SECRETS,
    cloud_section,
)

from bench.fake_cloud import FakeCloudHandle, run_fake_cloud_in_thread

# --------------------------------------------------------------------------- the suite's own logs


class _Collect(logging.Handler):
    """Keeps every log line of the in-process gateways (bounded), formatted as the gateway does."""

    def __init__(self, limit_bytes: int = 32 * 1024 * 1024) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.size, self.limit = 0, limit_bytes

    def emit(self, record: logging.LogRecord) -> None:
        if self.size > self.limit:
            return
        try:
            line = self.format(record)
        except Exception:
            line = record.getMessage()
        self.lines.append(line)
        self.size += len(line)


@pytest.fixture(scope="session", autouse=True)
def suite_log_audit() -> Iterator[_Collect]:
    """Every log record of this suite's in-process gateways, at INFO and above, is searched at the end
    for the secrets the tests configured (the subprocess gateway's log is audited in test_access.py)."""
    from edge.logs import JsonFormatter

    handler = _Collect()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(min(old_level or logging.INFO, logging.INFO))
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    text = "\n".join(handler.lines)
    leaked = [s[:6] + "..." for s in SUITE_SECRETS if s and s in text]
    assert not leaked, f"secrets found in the suite's logs: {leaked}"


# --------------------------------------------------------------------------- fake clouds


@pytest.fixture(scope="session")
def fake_cloud() -> Iterator[FakeCloudHandle]:
    handle = run_fake_cloud_in_thread()
    yield handle
    handle.stop()


@pytest.fixture
def fake(fake_cloud: FakeCloudHandle) -> FakeCloudHandle:
    fake_cloud.reset()
    return fake_cloud


@pytest.fixture(scope="session")
def untrusted_tls_cloud() -> Iterator[FakeCloudHandle]:
    """The HTTP/2 TLS fake; its throw-away CA is NOT given to the gateway, so TLS must fail."""
    handle = run_fake_cloud_in_thread(http2_tls=True)
    yield handle
    handle.stop()


# --------------------------------------------------------------------------- the matrix table


@pytest.fixture(scope="session")
def matrix(request: pytest.FixtureRequest) -> dict[str, dict[str, str]]:
    return request.config.stash.setdefault(MATRIX_KEY, {})


# --------------------------------------------------------------------------- a gateway subprocess


@pytest.fixture(scope="session")
def proc_fake() -> Iterator[FakeCloudHandle]:
    """The fake cloud behind the subprocess gateway; it demands the run's cloud key."""
    from bench.fake_cloud import FakeCloudConfig

    handle = run_fake_cloud_in_thread(FakeCloudConfig(api_key=PROC_SECRETS["cloud_key"]))
    yield handle
    handle.stop()


@pytest.fixture(scope="session")
def proc_gw(tmp_path_factory: pytest.TempPathFactory, proc_fake: FakeCloudHandle) -> Iterator[Any]:
    """``edgecloud serve`` as a child process (its own RSS, fds and logs), with an admin token, a cloud
    key and the cache on. Shared by the abuse tests and the log audit (tests/reliability/test_access.py)."""
    from bench.soak import gateway_process

    config = {
        "server": {"admin_token": PROC_SECRETS["admin_token"], "max_body_bytes": 1024 * 1024, "api_docs": True,
                   "header_timeout_s": HEADER_TIMEOUT_S, "body_timeout_s": BODY_TIMEOUT_S},
        "edge": {"default_max_tokens": 8, "max_tokens_limit": 64, "warmup": False},
        "cache": {"enabled": True},
        "cloud": cloud_section(proc_fake.base_url, api_key=PROC_SECRETS["cloud_key"]),
    }
    with gateway_process(tmp_path_factory.mktemp("proc-gw"), config) as gw:
        yield gw
