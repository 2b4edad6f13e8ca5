"""What one request may do with the cache, decided from its headers and its shape alone.

Kept apart from the storage so the rules that keep wrong answers out (multi-turn, tools, high
temperature, the kiosk's own ``cache-control``) read as one small table and are tested without a
database. Reading and writing are decided separately: ``no-cache`` means "answer fresh", and "then remember"
only where the operator allows clients to refresh shared answers (``allow_client_refresh``) or the
request shows the admin token; ``no-store`` and ``x-edgecloud-cache: bypass`` mean "leave the cache
alone". Lifetimes are capped by ``max_ttl_s`` whatever ``max-age`` asks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from edge.config import CacheConfig
from edge.types import ChatRequest

_DELTA_SECONDS = re.compile(r"[0-9]{1,12}")


@dataclass(frozen=True)
class CachePolicy:
    """``read``: may answer from the cache; ``write``: may store the answer; ``ttl_s``: lifetime."""

    read: bool
    write: bool
    ttl_s: float
    reason: str  # why; "ok" when both are allowed
    max_age_s: float | None = None  # the oldest stored answer this request accepts (cache-control)


@dataclass(frozen=True)
class CacheControl:
    """The request directives of a ``cache-control`` header that the gateway honours."""

    no_store: bool = False
    no_cache: bool = False
    max_age_s: float | None = None


def parse_cache_control(header: str | None) -> CacheControl:
    """Parse ``no-store``, ``no-cache`` and ``max-age=N``; unknown or malformed directives are ignored.

    A malformed ``max-age`` is ignored rather than rejected: the header is advice, and a kiosk
    with a typo should still get an answer.
    """
    if not header:
        return CacheControl()
    no_store = no_cache = False
    max_age: float | None = None
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        name = name.strip().lower()
        value = value.strip().strip('"')
        if name == "no-store":
            no_store = True
        elif name == "no-cache":
            no_cache = True
        elif name == "max-age":
            # Delta-seconds are digits only (RFC 9111); more than 12 of them (~31,700 years) is not a
            # lifetime but an attempt to overflow the float conversion: ignored like any other typo.
            if not _DELTA_SECONDS.fullmatch(value):
                continue
            seconds = float(int(value))
            max_age = seconds if max_age is None else min(max_age, seconds)
    return CacheControl(no_store=no_store, no_cache=no_cache, max_age_s=max_age)


def decide_policy(req: ChatRequest, config: CacheConfig) -> CachePolicy:
    """The first rule that forbids something wins; the reason names it for logs and headers."""
    ttl = float(config.default_ttl_s)
    if not config.enabled:
        return CachePolicy(False, False, ttl, "disabled")
    header = (req.cache_header or "").strip().lower()
    if header == "bypass":
        return CachePolicy(False, False, ttl, "bypass-header")
    control = parse_cache_control(req.cache_control)
    if control.no_store:
        return CachePolicy(False, False, ttl, "no-store")
    if req.is_multi_turn:
        # A follow-up ("and on Sunday?") means something only with its history: never answer it
        # from the cache, and never store an answer that leaned on that history.
        return CachePolicy(False, False, ttl, "multi-turn")
    if req.has_tools or req.has_images or req.has_schema:
        return CachePolicy(False, False, ttl, "tools" if req.has_tools else "unsupported-content")
    if not req.last_user_message.strip():
        return CachePolicy(False, False, ttl, "no-question")
    if (len(req.last_user_message) > config.max_question_chars
            or len(req.system_prompt) > config.max_system_prompt_chars):
        # A kiosk question is a line or two; normalising a megabyte for its key stalls every kiosk.
        return CachePolicy(False, False, ttl, "too-long")
    if control.max_age_s is not None:
        ttl = control.max_age_s
    ttl = min(ttl, float(config.max_ttl_s))  # one client must not pin a shared answer for years
    refresh = control.no_cache or header == "refresh"
    read = not refresh and ttl > 0
    # A refresh skips the read; overwriting the shared answer for every kiosk is the operator's call.
    write = ttl > 0 and (not refresh or config.allow_client_refresh or req.cache_admin)
    reason = "ok"
    if not read:
        reason = "no-cache" if refresh else "max-age-0"
    if req.temperature > config.max_cacheable_temperature and not config.allow_high_temperature:
        # A kiosk that asks for variety should not get the same sampled text forever. It may still
        # read: an operator FAQ answer, or an answer stored while the operator allowed it.
        write = False
        reason = "high-temperature" if read else reason
    return CachePolicy(read, write, ttl, reason, control.max_age_s)


__all__ = ["CacheControl", "CachePolicy", "decide_policy", "parse_cache_control"]
