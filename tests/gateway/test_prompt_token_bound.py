"""The decision sizes a prompt with a byte bound and tokenises only when the bound could break the budget.

``LocalModel.prompt_token_bound`` must never be below ``count_prompt_tokens`` (a prompt the bound lets
through must really fit), and the pipeline must fall back to the exact count near the budget, so a
prompt over it still goes to the cloud as ``prompt-size``. Real model, real tokenizer.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from edge.config import EdgeModelConfig, RouterConfig, Settings
from edge.local_model import LocalModel, find_embedded_model
from edge.pipeline import Pipeline
from edge.router import Router
from edge.schemas import parse_chat_request
from models.intent.runtime import IntentClassifier

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
        pipeline.close()
        await edge.aclose()

    asyncio.run(scenario())


class _Recording:
    """The shipped classifier, noting each call's thread; ``fail`` makes every call raise."""

    def __init__(self, fail: bool = False) -> None:
        self.inner = IntentClassifier.load()
        self.confidence_threshold = self.inner.confidence_threshold
        self.threads: list[str] = []
        self.fail = fail

    def classify(self, text: str) -> object:
        self.threads.append(threading.current_thread().name)
        if self.fail:
            raise RuntimeError("classifier broke")
        return self.inner.classify(text)


def _fields(d: object) -> tuple:
    return (d.route, d.reason, tuple(d.rules), d.label, d.confidence, d.prompt_tokens, d.prompt_tokens_exact,
            d.edge_ok, d.cloud_ok, d.refusal)


def test_the_exact_count_runs_beside_the_classifier_and_decides_as_in_series() -> None:
    """A prompt over the byte bound is counted on the counting thread while the classifier reads it here; the
    decision is field for field the one made one step after the other (a fitting prompt, one over the budget,
    earlier turns, a forced route), and the classifier is not run ahead where no size could bring the request
    to it. ``close`` stops the thread."""
    async def scenario() -> None:
        edge = LocalModel(EdgeModelConfig(n_ctx=512, parallel=1, warmup=False))
        await edge.load()
        counted: list[str] = []
        count = edge.count_prompt_tokens

        def counting(req: object) -> int:
            counted.append(threading.current_thread().name)
            return count(req)

        edge.count_prompt_tokens = counting  # type: ignore[method-assign]
        classifier = _Recording()
        router = Router(RouterConfig(max_prompt_share=0.5), classifier)
        pipeline = Pipeline(router, edge)
        fits = _req("Good morning! I walked here from the station with my two kids and the stroller, it took "
                    "ages because of the roadworks, and now they both want ice cream. " * 4 + "Where is the lift?")
        over = _req("Please summarise this contract clause by clause. " * 40)
        turns = parse_chat_request({"model": "edgecloud-auto", "messages": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 13}]}, SETTINGS, {})
        forced = parse_chat_request({"model": "edgecloud-cloud", "messages": [
            {"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 13}]}, SETTINGS, {})
        for req, ahead in ((fits, True), (over, True), (turns, False), (forced, False)):
            classifier.threads.clear()
            counted.clear()
            d = pipeline.decide(req)
            assert d.prompt_tokens_exact and counted and counted[0].startswith("edgecloud-token-count")
            assert classifier.threads == ([threading.current_thread().name] if ahead else [])  # once, here
            live = pipeline.live_state()
            serial = router.decide(req, live, count(req), prompt_tokens_exact=True)
            assert _fields(d) == _fields(serial)
        assert "prompt-size" in pipeline.decide(over).rules and pipeline.decide(fits).label is not None
        pipeline.close()
        assert not [t for t in threading.enumerate() if t.name.startswith("edgecloud-token-count")]
        await edge.aclose()

    asyncio.run(scenario())


def test_a_classifier_that_fails_ahead_fails_where_it_always_did() -> None:
    """Run ahead, a failing classifier costs nothing: a prompt over the budget still goes to the cloud by its
    size, and one that fits raises from the router's classifier step, as it did without the counting thread."""
    async def scenario() -> None:
        edge = LocalModel(EdgeModelConfig(n_ctx=512, parallel=1, warmup=False))
        await edge.load()
        pipeline = Pipeline(Router(RouterConfig(max_prompt_share=0.5), _Recording(fail=True)), edge)
        assert "prompt-size" in pipeline.decide(_req("Please summarise this contract clause by clause. " * 40)).rules
        with pytest.raises(RuntimeError, match="classifier broke"):
            pipeline.decide(_req("The quick brown fox jumps over the lazy dog. " * 13))
        pipeline.close()
        await edge.aclose()

    asyncio.run(scenario())
