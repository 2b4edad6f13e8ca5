"""The shapes of what the answer cache writes, and the ``CacheHit`` it reads back from them.

An answer row holds ``v`` (the schema), ``text``, ``finish_reason``, ``usage``, ``model``,
``route``, ``stored_at``, ``q`` (the normalised question), ``ctx`` (its context), ``kv`` (the
knowledge version) and, with semantic matching on, ``e`` (the question's packed vector). An FAQ row
holds ``v``, ``answer``, ``q``, ``id``, ``lang``, ``source``, ``stored_at`` and maybe ``e``. A row
of another shape is corrupt: the readers here raise ``CorruptEntry`` and the store deletes it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from edge.cache.disk import CorruptEntry
from edge.cache.policy import CachePolicy
from edge.types import Usage

VALUE_SCHEMA = 1
MAX_ANSWER_CHARS = 64 * 1024  # longer answers are rare and not worth the disk they take
FAQ_CONTEXT = "faq"  # the semantic index's context of FAQ questions


@dataclass
class CacheHit:
    """A cached answer, ready for the pipeline to send as route ``cache``."""

    text: str
    finish_reason: str
    usage: Usage
    reason: str  # "hit" | "faq" | "semantic"
    key: str
    stored_at: float
    model: str
    age_s: float


def faq_hit(key: str, value: dict[str, Any], reason: str) -> CacheHit:
    """The hit an FAQ row gives (FAQ answers never age out and cost no tokens)."""
    stored_at = float(value.get("stored_at", 0.0))
    return CacheHit(
        text=value["answer"], finish_reason="stop", usage=Usage(0, 0), reason=reason, key=key,
        stored_at=stored_at, model="faq", age_s=max(0.0, time.time() - stored_at),
    )


def checked_faq_row(value: Any, question: str) -> dict[str, Any]:
    """``value`` if it is the FAQ row of ``question``; else ``CorruptEntry``."""
    valid = isinstance(value, dict) and isinstance(value.get("answer"), str)
    if not valid or value.get("q") != question:
        raise CorruptEntry("an FAQ entry does not have the shape this cache writes")
    return value


def answer_hit(key: str, value: Any, policy: CachePolicy, reason: str) -> CacheHit | None:
    """The hit an answer row gives, or None when it is older than the request accepts
    (``cache-control: max-age``); ``CorruptEntry`` for a row of another shape."""
    valid = isinstance(value, dict) and isinstance(value.get("text"), str)
    if not valid or value.get("v") != VALUE_SCHEMA:
        raise CorruptEntry("a cached answer does not have the shape this cache writes")
    stored_at = float(value.get("stored_at", 0.0))
    age = max(0.0, time.time() - stored_at)
    if policy.max_age_s is not None and age > policy.max_age_s:
        return None
    usage = value.get("usage") or {}
    return CacheHit(
        text=value["text"],
        finish_reason=str(value.get("finish_reason", "stop")),
        usage=Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))),
        reason=reason,
        key=key,
        stored_at=stored_at,
        model=str(value.get("model", "")),
        age_s=age,
    )
