"""The decision sizes a prompt with a byte bound and tokenises only when the bound could break the budget.

``LocalModel.prompt_token_bound`` must never be below ``count_prompt_tokens`` (a prompt the bound lets
through must really fit), and the pipeline must fall back to the exact count near the budget, so a
prompt over it still goes to the cloud as ``prompt-size``. Real model, real tokenizer.
"""

from __future__ import annotations

import asyncio

import pytest

from edge.config import EdgeModelConfig, RouterConfig, Settings
from edge.local_model import LocalModel, find_embedded_model
from edge.pipeline import Pipeline
from edge.router import Router
from edge.schemas import parse_chat_request

pytestmark = pytest.mark.skipif(find_embedded_model() is None, reason="embedded model not installed")

SETTINGS = Settings()
TEXTS = [
    "", "a", "Where is the restroom?", "洗手间在哪里？", "wifi 密码是多少", "🙂🙂🙂 emoji only 🚻",
    "def f(x):\n    return x ** 2  # square", "  spaced   out\ttext\n\n", "ÅÄÖ àéîõü ß ﬁ ½ ①", "x" * 700,
    "请问" * 200, "The quick brown fox " * 40,
]


def _req(text: str, system: str | None = "You are a mall kiosk.") -> object:
    messages = ([{"role": "system", "content": system}] if system is not None else []) + [
        {"role": "user", "content": text or "?"}]
    return parse_chat_request({"model": "edgecloud-auto", "messages": messages}, SETTINGS, {})


def test_bound_is_never_below_the_exact_count() -> None:
    async def scenario() -> None:
        edge = LocalModel(EdgeModelConfig(n_ctx=512, parallel=1, warmup=False))
        await edge.load()
        for text in TEXTS:
            for system in ("You are a mall kiosk.", None):
                req = _req(text, system)
                exact = edge.count_prompt_tokens(req)
                assert edge.count_prompt_tokens(req) == exact  # the memoised count is the same count
                assert edge.prompt_token_bound(req) >= exact, text[:40]
        await edge.aclose()

    asyncio.run(scenario())


def test_the_pipeline_tokenises_only_near_the_budget() -> None:
    async def scenario() -> None:
        edge = LocalModel(EdgeModelConfig(n_ctx=512, parallel=1, warmup=False))
        await edge.load()
        pipeline = Pipeline(Router(RouterConfig(max_prompt_share=0.5)), edge)
        short = pipeline.decide(_req("Where is the restroom?"))
        assert not short.prompt_tokens_exact and short.prompt_tokens >= edge.count_prompt_tokens(
            _req("Where is the restroom?"))
        # ~150 tokens of text in ~600 bytes: over the 256-token budget by the bound, under it exactly.
        near = "The quick brown fox jumps over the lazy dog. " * 13
        d = pipeline.decide(_req(near))
        assert d.prompt_tokens_exact and d.prompt_tokens == edge.count_prompt_tokens(_req(near))
        assert "prompt-size" not in d.rules
        over = pipeline.decide(_req("The quick brown fox jumps over the lazy dog. " * 40))
        assert over.prompt_tokens_exact and over.prompt_tokens > 256 and "prompt-size" in over.rules
        await edge.aclose()

    asyncio.run(scenario())
