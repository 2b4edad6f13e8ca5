"""Fixtures of the reliability suite, and the fault matrix printed at the end of the session.

The matrix goes to the terminal summary (no ``-s`` needed) and to ``bench/results/fault_matrix.txt``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from reliability.support import MATRIX_KEY, RESULTS, render_matrix

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
