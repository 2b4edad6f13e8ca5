"""The llama.cpp threads run at a lower CPU priority than the event loop (edge/thread_priority.py).

With a decode on every core at the loop's own priority, the router's decision waited for a core: its P99 rose
from about 0.6 ms to 4.5-4.8 ms on a 2-vCPU machine. The compute thread adds ``[edge] compute_nice`` to its
nice value before its first computation, and the OpenMP team it then starts inherits it. Here with the real
llama-cpp-python and the embedded model: every thread of the team runs at the lowered value, the rest of the
process does not.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from edge.config import EdgeModelConfig
from edge.local_model import LocalModel, find_embedded_model
from edge.thread_priority import MAX_NICE, lower_current_thread, thread_nice
from edge.types import ChatRequest, Finish, Message

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")


def _in_new_thread(increment: int) -> tuple[int | None, int | None]:
    """What ``lower_current_thread`` returns in a fresh thread, and the nice value that thread then has."""
    out: list[int | None] = []

    def run() -> None:
        out.append(lower_current_thread(increment))
        out.append(thread_nice(threading.get_native_id()))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0], out[1]


def _nices_of_process() -> dict[int, int]:
    """Every thread of this process by native id, with its nice value."""
    out = {}
    for entry in Path("/proc/self/task").iterdir():
        value = thread_nice(int(entry.name))
        if value is not None:
            out[int(entry.name)] = value
    return out


@linux_only
def test_a_thread_lowers_only_itself() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    returned, seen = _in_new_thread(3)
    assert returned == seen == min(MAX_NICE, base + 3)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base  # the caller's thread is untouched


@linux_only
def test_the_increment_is_capped_and_zero_changes_nothing() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert _in_new_thread(100) == (MAX_NICE, MAX_NICE)
    assert _in_new_thread(0) == (None, base)
    assert _in_new_thread(-5) == (None, base)  # never raised: that would need a privilege


def test_a_refusal_is_logged_not_raised(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(sys, "platform", "linux")

    def refuse(*_args: object) -> None:
        raise PermissionError("operation not permitted")

    monkeypatch.setattr(os, "setpriority", refuse)
    assert lower_current_thread(5) is None
    assert "could not lower the priority" in caplog.text


def test_other_platforms_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert lower_current_thread(5) is None


def test_the_setting_is_a_nice_increment() -> None:
    assert EdgeModelConfig().compute_nice == 10
    for bad in (-1, 20):
        with pytest.raises(ValidationError):
            EdgeModelConfig(compute_nice=bad)


@linux_only
@pytest.mark.skipif(find_embedded_model() is None, reason="embedded model not installed")
@pytest.mark.parametrize("parallel", [1, 4])
def test_the_openmp_team_runs_at_the_lowered_priority(parallel: int) -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    lowered = min(MAX_NICE, base + 4)
    seen: dict[int, int] = {}

    async def scenario() -> None:
        before = set(_nices_of_process())
        edge = LocalModel(EdgeModelConfig(n_ctx=512, parallel=parallel, n_threads=2, compute_nice=4))
        await edge.load()
        req = ChatRequest(messages=[Message("user", "Hi")], max_tokens=4, temperature=0.0)
        events = [event async for event in edge.generate(req)]
        assert isinstance(events[-1], Finish)
        seen.update({tid: nice for tid, nice in _nices_of_process().items() if tid not in before})
        compute = next(t for t in threading.enumerate() if t.name == "llama-gen")
        assert seen.get(compute.native_id) == lowered
        await edge.aclose()

    asyncio.run(scenario())
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base  # the event loop's thread
    # the compute thread and the OpenMP worker it started (two threads: one worker besides itself)
    assert sum(1 for nice in seen.values() if nice == lowered) >= 2, seen
