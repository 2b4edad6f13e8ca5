"""``Pipeline.preview`` (what ``POST /v1/route`` shows): the pipeline's own way, with no side effect.

A preview must not count a cache hit or miss, must not move a cached answer up the LRU order,
must not run a slow (semantic) cache read on the event loop, and must start no backend.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from edge.app import preview_body
from edge.backends import AnswerCacheStore
from edge.cache import AnswerCache, CacheHit, CachePolicy
from edge.cache import diskcache_private as dc
from edge.config import CacheConfig
from edge.types import ChatRequest, Finish, Usage

from .scripted import ScriptedCloud, ask, rig

QUESTION = "Where can I buy a phone charger?"


class ThreadNoting:
    """A semantic-enabled cache stand-in that notes which thread each read ran on."""

    semantic_enabled = True

    def __init__(self) -> None:
        self.threads: dict[str, int] = {}
        self.stored = 0

    def policy(self, req: ChatRequest) -> CachePolicy:
        return CachePolicy(True, True, 60.0, "ok")

    def lookup(self, req: ChatRequest, policy: CachePolicy) -> CacheHit | None:
        self.threads["lookup"] = threading.get_ident()
        return None

    def peek(self, req: ChatRequest, policy: CachePolicy) -> CacheHit | None:
        self.threads["peek"] = threading.get_ident()
        return CacheHit("Level 2.", "stop", Usage(), "semantic", "k", 0.0, "m", 1.0)

    def store(self, req: ChatRequest, text: str, finish: Finish, **kwargs: object) -> bool:
        self.stored += 1
        return True


def test_a_slow_cache_read_runs_off_the_loop_and_the_preview_starts_nothing() -> None:
    async def scenario() -> None:
        cache = ThreadNoting()
        assert isinstance(cache, AnswerCacheStore)
        r = rig(cache=cache)
        preview = await r.pipeline.preview(ask(QUESTION, temperature=0), peek_cache=True)
        assert cache.threads["peek"] != threading.get_ident()  # a worker thread, not the loop's
        assert "lookup" not in cache.threads
        assert r.edge.calls == 0 and r.cloud.calls == 0 and r.records == []
        body = preview_body(preview)
        assert (body["route"], body["reason"]) == ("cache", "cache:semantic")
        assert body["cache"] == {"read": True, "write": True, "hit": True, "reason": "semantic"}
        # The request path reads the same way: off the loop as well.
        await r.pipeline.complete(ask(QUESTION, temperature=0))
        assert cache.threads["lookup"] != threading.get_ident()

    asyncio.run(scenario())


def test_whether_a_question_is_cached_is_told_only_when_asked_for() -> None:
    async def scenario() -> None:
        cache = ThreadNoting()
        r = rig(cache=cache)
        body = preview_body(await r.pipeline.preview(ask(QUESTION, temperature=0), peek_cache=False))
        assert "peek" not in cache.threads
        assert body["cache"] == {"read": True, "write": True, "hit": None, "reason": "ok"}
        assert body["route"] == "edge"

    asyncio.run(scenario())


def test_a_refused_request_previews_as_its_openai_error() -> None:
    async def scenario() -> None:
        r = rig(cloud=ScriptedCloud(up=False), label="complex", confidence=0.97)
        body = preview_body(await r.pipeline.preview(ask("Explain quantum tunnelling in depth"), peek_cache=False))
        assert body["refusal"]["kind"] == "cloud_unavailable"
        assert body["error"] == {"message": body["refusal"]["message"], "type": "server_error", "param": None,
                                 "code": "cloud_unavailable"}

    asyncio.run(scenario())


def test_a_preview_of_a_real_cache_counts_nothing_and_keeps_the_lru_order(tmp_path: Path) -> None:
    cache = AnswerCache(CacheConfig(), tmp_path)
    cache.set_fingerprint("edge=test")
    try:
        req = ask(QUESTION, temperature=0)
        stored = cache.store(req, "Level 2, next to the pharmacy.", Finish("stop", Usage(5, 7), {}, "m"),
                             route="edge", model="m", policy=cache.policy(req))
        assert stored
        answers = cache._answers
        (key,) = list(answers.iterkeys())
        dc.write_access_times(answers, [(1000.0, key)])
        before = {k: cache.stats()[k] for k in ("hits", "misses", "exact_hits")}

        async def preview_twice() -> None:
            r = rig(cache=cache)
            for _ in range(2):
                body = preview_body(await r.pipeline.preview(ask(QUESTION, temperature=0), peek_cache=True))
                assert (body["route"], body["cache"]["hit"]) == ("cache", True)
            body = preview_body(await r.pipeline.preview(ask("Is there a cinema?", temperature=0), peek_cache=True))
            assert body["cache"]["hit"] is False

        asyncio.run(preview_twice())
        _store_another(cache)  # a store writes the batched access times first
        assert dc.access_time(answers, key) == 1000.0
        assert {k: cache.stats()[k] for k in before} == before

        # The request path does both: so the checks above can fail.
        assert cache.lookup(req, cache.policy(req)) is not None
        _store_another(cache, "Is there a pharmacy?")
        assert dc.access_time(answers, key) > 1000.0
        assert cache.stats()["hits"] == before["hits"] + 1
    finally:
        cache.close()


def _store_another(cache: AnswerCache, question: str = "Where is the food court?") -> None:
    req = ask(question, temperature=0)
    assert cache.store(req, "Level 3.", Finish("stop", Usage(5, 2), {}, "m"), route="edge", model="m",
                       policy=cache.policy(req))


def test_a_semantic_peek_finds_the_neighbour_off_the_loop_and_counts_nothing(tmp_path: Path) -> None:
    """With the real MiniLM index: the paraphrase is found, in a worker thread, and nothing moves."""
    cache = AnswerCache(CacheConfig(semantic=True), tmp_path)
    cache.set_fingerprint("edge=test")
    try:
        assert cache.semantic_enabled
        _store_another(cache, QUESTION)
        answers = cache._answers
        (key,) = list(answers.iterkeys())
        dc.write_access_times(answers, [(1000.0, key)])
        before = cache.stats()
        paraphrase = ask("Where could I buy a phone charger?", temperature=0)
        peeked_on: list[int] = []
        peek = cache.peek

        def noting_peek(req: ChatRequest, policy: CachePolicy) -> CacheHit | None:
            peeked_on.append(threading.get_ident())
            return peek(req, policy)

        cache.peek = noting_peek  # type: ignore[method-assign]

        async def preview() -> tuple[dict, int]:
            r = rig(cache=cache)
            return preview_body(await r.pipeline.preview(paraphrase, peek_cache=True)), threading.get_ident()

        body, loop_thread = asyncio.run(preview())
        assert (body["route"], body["reason"], body["cache"]["hit"]) == ("cache", "cache:semantic", True)
        assert peeked_on and peeked_on[0] != loop_thread
        _store_another(cache)
        assert dc.access_time(answers, key) == 1000.0
        after = cache.stats()
        assert {k: after[k] for k in ("hits", "misses", "semantic_hits")} == {
            k: before[k] for k in ("hits", "misses", "semantic_hits")}
    finally:
        cache.close()
