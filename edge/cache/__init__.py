"""The answer cache: repeated kiosk questions answered in milliseconds, never wrongly.

``AnswerCache`` (diskcache + JSON, FAQ packs, optional guarded semantic matching), the per-request
``CachePolicy``, ``replay_chunks`` for streaming a hit, and the admin router. See docs/cache.md.
"""

from edge.cache.admin import cache_admin_router
from edge.cache.answer_cache import AnswerCache, CacheHit
from edge.cache.keys import normalize_text
from edge.cache.policy import CachePolicy, parse_cache_control
from edge.cache.replay import replay_chunks

__all__ = [
    "AnswerCache",
    "CacheHit",
    "CachePolicy",
    "cache_admin_router",
    "normalize_text",
    "parse_cache_control",
    "replay_chunks",
]
