"""Fixtures of the reliability suite, and the fault matrix printed at the end of the session.

The matrix goes to the terminal summary (no ``-s`` needed) and to ``bench/results/fault_matrix.txt``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from reliability.support import MATRIX_KEY, PROC_SECRETS, RESULTS, cloud_section, render_matrix

from bench.fake_cloud import FakeCloudHandle, run_fake_cloud_in_thread

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


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    cells = config.stash.get(MATRIX_KEY, None)
    if not cells:
        return
    text = render_matrix(cells)
    terminalreporter.write_sep("=", "fault matrix (what the kiosk saw)")
    terminalreporter.write(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "fault_matrix.txt").write_text(text, encoding="utf-8")


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
        "server": {"admin_token": PROC_SECRETS["admin_token"], "max_body_bytes": 1024 * 1024},
        "edge": {"default_max_tokens": 8, "max_tokens_limit": 64, "warmup": False},
        "cache": {"enabled": True},
        "cloud": cloud_section(proc_fake.base_url, api_key=PROC_SECRETS["cloud_key"]),
    }
    with gateway_process(tmp_path_factory.mktemp("proc-gw"), config) as gw:
        yield gw
