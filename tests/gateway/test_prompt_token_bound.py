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


def test_a_complex_paste_goes_to_the_cloud_without_its_tokens_counted() -> None:
    """With a cloud that can take it, a long message the real classifier calls complex is routed
    by its label and never tokenised; a simple one is still counted (``Router.decide``)."""
    from bench.fake_cloud import refused_base_url
    from cloud_bridge.config import CloudConfig, ProviderConfig
    from edge.cloud_backend import CloudBackend
    from models.intent.runtime import IntentClassifier

    async def scenario() -> None:
        edge = LocalModel(EdgeModelConfig(n_ctx=512, parallel=1, warmup=False))
        await edge.load()
        # Nothing is sent to this closed port: the decision only asks whether the cloud may be used.
        cloud = CloudBackend(CloudConfig(providers=[ProviderConfig(name="t", base_url=refused_base_url())],
                                         warmup=False, keep_warm=False))
        pipeline = Pipeline(Router(RouterConfig(max_prompt_share=0.5), IntentClassifier.load()), edge, cloud)
        assert pipeline.live_state().cloud_available
        counted: list[str] = []
        count = edge.count_prompt_tokens
        edge.count_prompt_tokens = lambda r: counted.append(r.last_user_message) or count(r)  # type: ignore[method-assign]
        proof = ("Prove that the square root of two is irrational, then derive a closed form for the sum of "
                 "the first n cubes and prove it by induction, showing every step. ") * 6
        d = pipeline.decide(_req(proof))
        assert counted == [] and (d.route, d.label, d.prompt_tokens_exact) == ("cloud", "complex", False)
        assert d.prompt_tokens >= count(_req(proof)) and d.edge_ok is False
        chatty = ("Good evening! We just came out of the most wonderful dinner, my husband insisted on dessert and now "
                  "we are both too full to move, and our daughter is texting us that the film starts soon, she is "
                  "already waiting by the popcorn stand with her friends and the tickets are on my phone which is "
                  "nearly out of battery, so we really need to hurry a little. Which floor is the cinema on?")
        d = pipeline.decide(_req(chatty))
        assert counted == [chatty] and d.prompt_tokens_exact and d.label == "simple"
        await cloud.aclose()
        await edge.aclose()

    asyncio.run(scenario())
