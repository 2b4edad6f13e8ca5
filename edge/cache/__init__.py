"""The answer cache: repeated kiosk questions answered in milliseconds, never wrongly.

``AnswerCache`` (diskcache + JSON, FAQ packs, optional guarded semantic matching), the per-request
``CachePolicy``, ``replay_chunks`` for streaming a hit, and the admin router. See docs/cache.md.
"""

from typing import Any

from edge.cache.answer_cache import AnswerCache, CacheHit
from edge.cache.keys import normalize_text
from edge.cache.policy import CachePolicy, parse_cache_control
from edge.cache.replay import replay_chunks


def __getattr__(name: str) -> Any:
    """``cache_admin_router`` is imported on first use: the cache itself needs no web framework."""
    if name == "cache_admin_router":
        from edge.cache.admin import cache_admin_router

        return cache_admin_router
    raise AttributeError(f"module 'edge.cache' has no attribute {name!r}")


__all__ = [
    "AnswerCache",
    "CacheHit",
    "CachePolicy",
    "cache_admin_router",
    "normalize_text",
    "parse_cache_control",
    "replay_chunks",
]
