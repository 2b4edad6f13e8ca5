"""The one-at-a-time edge runner reuses llama.cpp sampler chains (models/llama_runtime.py: ``reuse_samplers``;
the batched runner's pool is tested in test_batching.py).

``Llama.generate`` builds a new chain per request, and the process grew ~20 MB over the first 40
requests that way. Reuse must not change what a request gets: the same seed gives the same draws,
and a greedy request stays greedy. Real model, real runner.
"""

from __future__ import annotations

import asyncio

import llama_cpp
import pytest

from edge.config import EdgeModelConfig
from edge.local_model import LocalModel, find_embedded_model
from tests.harness import edge_answer

pytestmark = pytest.mark.skipif(find_embedded_model() is None, reason="embedded model not installed")


async def _answer(edge: LocalModel, **fields: object) -> str:
    text, _ = await edge_answer(edge, "Tell me about the mall.", max_tokens=12, **fields)
    return text


def test_chains_are_reused_and_answers_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[dict[str, object]] = []
    original = llama_cpp.Llama._init_sampler

    def counting(self, **kwargs):  # type: ignore[no-untyped-def]
        built.append(kwargs)
        return original(self, **kwargs)

    monkeypatch.setattr(llama_cpp.Llama, "_init_sampler", counting)

    async def scenario() -> None:
        edge = LocalModel(EdgeModelConfig(n_ctx=512, parallel=1))
        await edge.load()
        greedy = [await _answer(edge, temperature=0.0) for _ in range(3)]
        assert len(set(greedy)) == 1 and greedy[0]
        assert len(built) == 1  # one chain for the three greedy requests
        seeded = [await _answer(edge, temperature=1.0, seed=1234) for _ in range(2)]
        assert seeded[0] == seeded[1]  # a reset chain draws exactly like a new one with that seed
        await _answer(edge, temperature=1.0, seed=99)
        assert len(built) == 3  # new settings or seed: a new chain
        await edge.aclose()

    asyncio.run(scenario())
