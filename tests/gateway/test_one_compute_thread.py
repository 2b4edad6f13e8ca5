"""Every llama.cpp computation runs on the gateway's one generation thread (edge/local_model.py).

A warm-up decode on another thread that stays alive leaves a second OpenMP team behind, and libgomp
then sleeps at every barrier instead of spinning: decode ran at about half speed through the gateway
(61-66 against 105-120 tokens/s on a 2-core box). The real model and the real runner, with
``Llama.eval`` (the one-at-a-time runner) and ``Batch.decode`` (the batched one) recording the calling thread.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import llama_cpp
import pytest

from edge.config import EdgeModelConfig
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
