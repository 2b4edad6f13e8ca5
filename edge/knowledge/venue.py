"""Is a question about this venue? Only then may "no evidence" mean "say you don't know".

A kiosk also gets general questions ("translate thank you into French", "what is 15% of 80") that
no venue pack covers and a model may answer; refusing those would be wrong. A question counts as
about the venue when it uses the pack's own words (retrieval found something), or when it has the
shape of a place question: where / which floor / is there / opening hours / how much / allowed,
and their Chinese forms. Operators add their own cue words (``[knowledge] venue_terms``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_EN_CUES = (
    r"\bwhere\b", r"\bwhere'?s\b", r"\bwher\b", r"\bwhich (floor|level)\b", r"\bwhat (floor|level)\b",
    r"\bis there\b", r"\bare there\b", r"\bdo (you|u) (have|sell|rent|lend)\b", r"\bany\b.*\bhere\b",
    r"\bopen(ing)?\b", r"\bclos(e|es|ed|ing)\b", r"\bhours\b", r"\bhow (much|late|early|long)\b",
    r"\b(price|prices|cost|costs|fee|fees|charge)\b", r"\ballowed\b", r"\bcan i (bring|park|smoke|pay|take|leave|"
    r"borrow|rent|buy|get|eat|find|use)\b", r"\bnearest\b", r"\bnearby\b", r"\b(this|the) (mall|building|terminal|"
    r"station|hotel|hospital|museum|airport)\b", r"\bhere\b", r"\bfloor\b", r"\blevel\b",
)
_ZH_CUES = (
    "哪里", "哪儿", "在哪", "几楼", "几层", "哪层", "哪一层", "有没有", "几点", "营业", "开门", "关门", "多少钱",
    "收费", "价格", "附近", "商场", "这里", "能不能", "可不可以", "允许", "怎么走", "在几",
)
_ZH_PATTERNS = (r"有.{1,12}吗", r"可以.{1,12}吗", r"能.{1,12}吗")


class VenueDetector:
    """Cue patterns, compiled once per configuration."""

    def __init__(self, extra_terms: Iterable[str] = ()) -> None:
        extra = [re.escape(t.strip().lower()) for t in extra_terms if t.strip()]
        self._en = re.compile("|".join((*_EN_CUES, *(rf"\b{t}\b" for t in extra))), re.IGNORECASE)
        self._zh = re.compile("|".join((*(re.escape(c) for c in _ZH_CUES), *_ZH_PATTERNS, *extra)))

    def looks_like_venue_question(self, question: str) -> bool:
        return bool(self._en.search(question) or self._zh.search(question))


__all__ = ["VenueDetector"]
