"""Every llama.cpp computation runs on the gateway's one generation thread (edge/local_model.py).

A warm-up decode on another thread that stays alive leaves a second OpenMP team behind, and libgomp
then sleeps at every barrier instead of spinning: decode ran at about half speed through the gateway
(61-66 against 105-120 tokens/s on a 2-core box). The real model and the real runner, with
``Llama.eval`` (the one-at-a-time runner) and ``Batch.decode`` (the batched one) recording the calling thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import llama_cpp
import pytest

from edge.config import EdgeModelConfig
from edge.errors import APIError
from edge.local_model import LocalModel, find_embedded_model
from edge.types import ChatRequest, Finish, Message
from models import llama_runtime

pytestmark = pytest.mark.skipif(find_embedded_model() is None, reason="embedded model not installed")


@pytest.mark.parametrize("parallel", [1, 4])
def test_load_warm_up_generate_and_swap_compute_on_one_thread(parallel: int, monkeypatch: pytest.MonkeyPatch) -> None:
    callers: list[str] = []
    original = llama_cpp.Llama.eval
    original_decode = llama_runtime.Batch.decode

    def recording_eval(self, tokens):  # type: ignore[no-untyped-def]
        callers.append(threading.current_thread().name)
        return original(self, tokens)

    def recording_decode(self):  # type: ignore[no-untyped-def]
        callers.append(threading.current_thread().name)
        return original_decode(self)

    monkeypatch.setattr(llama_cpp.Llama, "eval", recording_eval)
    monkeypatch.setattr(llama_runtime.Batch, "decode", recording_decode)

    async def scenario() -> None:
        edge = LocalModel(EdgeModelConfig(n_ctx=512, parallel=parallel))
        await edge.load()
        assert edge.ready and callers, "the warm-up decode ran"
        req = ChatRequest(messages=[Message("user", "Hi")], max_tokens=4, temperature=0.0)
        events = [event async for event in edge.generate(req)]
        assert isinstance(events[-1], Finish)
        await edge.swap(Path(str(edge.model_path)), "same-file-again")  # a hot swap warms up too
        events = [event async for event in edge.generate(req)]
        assert isinstance(events[-1], Finish)
        await edge.aclose()

    asyncio.run(scenario())
    assert len(callers) >= 4  # two warm-ups and two generations (prefill + decode steps)
    assert set(callers) == {callers[0]} and callers[0].startswith("llama-gen"), callers


def test_closing_waits_for_the_step_under_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """``aclose`` returns only once the compute thread has ended, even in the middle of a slow step.

    The thread is a daemon: an interpreter that exited while it was inside a step tore llama.cpp down under
    the running graph, and the process died with a segfault at exit (``bench.route_overhead --decode
    --busy-cores 1`` with the compute thread at nice 10, two runs of two). Here a slowed step stands in."""
    original_decode = llama_runtime.Batch.decode
    in_step = threading.Event()

    def slow_decode(self):  # type: ignore[no-untyped-def]
        in_step.set()
        time.sleep(0.4)
        return original_decode(self)

    async def scenario() -> None:
        edge = LocalModel(EdgeModelConfig(n_ctx=512, parallel=4))
        await edge.load()
        monkeypatch.setattr(llama_runtime.Batch, "decode", slow_decode)
        req = ChatRequest(messages=[Message("user", "Hi")], max_tokens=32, temperature=0.0)

        async def answer() -> list:
            return [event async for event in edge.generate(req)]

        task = asyncio.create_task(answer())
        assert await asyncio.to_thread(in_step.wait, 10.0)
        thread = edge._compute._thread
        assert thread is not None and thread.is_alive()
        await edge.aclose()
        assert not thread.is_alive()
        with pytest.raises(APIError) as failed:  # the request in the slot is told, not left hanging
            await asyncio.wait_for(task, 5.0)
        assert failed.value.status == 503

    asyncio.run(scenario())
