"""Cache keys: what makes two requests "the same question", and nothing looser.

The normaliser folds only what never changes meaning: Unicode compatibility forms (full-width
letters and digits, ideographic spaces), letter case, runs of whitespace, punctuation (ASCII, CJK
and full-width) and the spaces a Chinese writer may or may not put between characters. It never
drops a word, a digit or a negation, so "when does the pharmacy close" and "when does the pharmacy
open" stay apart; looser matching is the semantic layer's job, behind its own guards.

The key hashes everything else that changes the answer: the system prompt, the route the kiosk
asked for, the answering models' fingerprint, the generation settings and the operator's
knowledge version, so a model swap or an FAQ update can never serve an answer from before it.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from edge.types import ChatRequest

KEY_SCHEMA = 1

# Apostrophes and hyphens inside a word are deleted ("don't" -> "dont", "wi-fi" -> "wifi") so both
# spellings meet; between digits a hyphen stays a separator ("3-5" must not become "35"). Each pattern of this
# module opens with the character it removes and looks behind only after it: ``re`` then scans for that
# character at C speed, where a pattern that opens with a lookbehind is tried at every position (three times
# the cost on a long message).
_INNER_JOINERS = re.compile(r"['’‘`\-‐‑](?<=[^\W\d_].)(?=[^\W\d_])")
# A thousands separator between digits is dropped: "1,000" == "1000".
_DIGIT_COMMA = re.compile(r",(?<=\d,)(?=\d{3}(?!\d))")
_SPACES = re.compile(r"\s+")


def _punctuation_table() -> dict[int, str]:
    """Every punctuation code point of the Basic Multilingual Plane (ASCII, CJK, full-width) -> space."""
    return {code: " " for code in range(0x10000) if unicodedata.category(chr(code)).startswith("P")}


# Built once at import (a few milliseconds): str.translate then folds punctuation at C speed.
_PUNCTUATION = _punctuation_table()
_CJK_CLASS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f"
# A space with a CJK character on either side: Chinese does not separate words with spaces.
_CJK_SPACE = re.compile(f" (?:(?=[{_CJK_CLASS}])|(?<=[{_CJK_CLASS}] ))")


def normalize_text(text: str) -> str:
    """The canonical form of a question: the same for every spelling that means the same."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _INNER_JOINERS.sub("", text)
    text = _DIGIT_COMMA.sub("", text)
    # Punctuation becomes a space; letters, digits and symbols (%, $, +) are kept. ``split()`` splits at the
    # characters ``\s`` matches (both ask ``str.isspace``), so this is ``\s+`` -> " " and a strip, in C.
    words = " ".join(text.translate(_PUNCTUATION).split())
    # Drop a space only where one side is CJK: "商场 几点 开门" == "商场几点开门", "wifi 密码" ==
    # "wifi密码"; spaces between Latin words and between numbers ("1 5" vs "15") stay.
    return _CJK_SPACE.sub("", words)


_PROMPT_FOLD_CHARS = 4096


def _normalize_prompt(text: str) -> str:
    """System prompts are compared almost verbatim: only outer and repeated whitespace is folded.

    A long one is taken as it is: folding costs milliseconds on the event loop, and a kiosk sends
    the same long prompt byte for byte anyway."""
    if len(text) > _PROMPT_FOLD_CHARS:
        return text
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", text)).strip()


@dataclass(frozen=True)
class KeyParts:
    """The inputs of one key, kept so the cache can store the question and the context next to it."""

    question: str  # normalised last user message
    context: str  # sha256 over everything but the question: the semantic layer's neighbourhood
    key: str  # sha256 over question + context


def generation_settings(req: ChatRequest) -> dict[str, object]:
    """The settings that change the text a model produces (not stream or user)."""
    return {
        "temperature": round(float(req.temperature), 4),
        "top_p": round(float(req.top_p), 4),
        "max_tokens": req.max_tokens,
        "stop": list(req.stop),
        "seed": req.seed,
    }


def _digest(payload: dict[str, object]) -> str:
    canonical = json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@lru_cache(maxsize=256)
def _context(system: str, route: str, route_header: str | None, fingerprint: str,
             generation: tuple[tuple[str, object], ...], knowledge_version: str) -> str:
    """Kiosks send the same system prompt and settings all day: hash them once, not per request."""
    return _digest({
        "schema": KEY_SCHEMA,
        "system": _normalize_prompt(system),
        "route": route,
        "route_header": route_header,
        "fingerprint": fingerprint,
        "generation": dict(generation),
        "knowledge": knowledge_version,
    })


def key_parts(req: ChatRequest, fingerprint: str, knowledge_version: str) -> KeyParts:
    """The exact-match key of a request and its context hash."""
    generation = generation_settings(req)
    generation["stop"] = tuple(req.stop)
    context = _context(
        req.system_prompt, req.route_name, (req.route_header or "").strip().lower() or None, fingerprint,
        tuple(sorted(generation.items())), knowledge_version,
    )
    question = normalize_text(req.last_user_message)
    return KeyParts(question=question, context=context, key=answer_key(context, question))


def answer_key(context: str, normalized_question: str) -> str:
    """sha256 over the context hash (fixed-length hex) and the normalised question."""
    return hashlib.sha256(f"{context}\n{normalized_question}".encode()).hexdigest()


def faq_key(normalized_question: str) -> str:
    """FAQ answers are the operator's truth for every model, prompt and setting: keyed by the
    (already normalised) question alone. Loading a newer pack replaces the older one's entries, so
    no knowledge version is needed here.
    """
    return hashlib.sha256(f"faq/{KEY_SCHEMA}\n{normalized_question}".encode()).hexdigest()


__all__ = ["KEY_SCHEMA", "KeyParts", "answer_key", "faq_key", "generation_settings", "key_parts", "normalize_text"]
