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

from edge.types import ChatRequest

KEY_SCHEMA = 1

# Apostrophes and hyphens inside a word are deleted ("don't" -> "dont", "wi-fi" -> "wifi") so both
# spellings meet; between digits a hyphen stays a separator ("3-5" must not become "35").
_INNER_JOINERS = re.compile(r"(?<=[^\W\d_])['’‘`\-‐‑](?=[^\W\d_])")
# A thousands separator between digits is dropped: "1,000" == "1000".
_DIGIT_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_SPACES = re.compile(r"\s+")


def _is_cjk(char: str) -> bool:
    code = ord(char)
    return (
        0x4E00 <= code <= 0x9FFF  # CJK unified ideographs
        or 0x3400 <= code <= 0x4DBF  # extension A
        or 0x20000 <= code <= 0x2FA1F  # extensions B-F, compatibility supplement
        or 0xF900 <= code <= 0xFAFF  # compatibility ideographs
        or 0x3040 <= code <= 0x30FF  # kana (Japanese questions reach Chinese kiosks too)
        or 0xAC00 <= code <= 0xD7AF  # hangul
    )


def _fold_char(char: str) -> str:
    """Punctuation becomes a space; letters, digits and symbols (%, $, +) are kept."""
    if unicodedata.category(char).startswith("P"):
        return " "
    return char


def normalize_text(text: str) -> str:
    """The canonical form of a question: the same for every spelling that means the same."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _INNER_JOINERS.sub("", text)
    text = _DIGIT_COMMA.sub("", text)
    text = "".join(_fold_char(c) for c in text)
    words = _SPACES.sub(" ", text).strip()
    if not words:
        return ""
    # Drop a space only where one side is CJK: "商场 几点 开门" == "商场几点开门", "wifi 密码" ==
    # "wifi密码"; spaces between Latin words and between numbers ("1 5" vs "15") stay.
    out: list[str] = []
    for index, char in enumerate(words):
        if char == " " and (_is_cjk(words[index - 1]) or _is_cjk(words[index + 1])):
            continue
        out.append(char)
    return "".join(out)


def _normalize_prompt(text: str) -> str:
    """System prompts are compared almost verbatim: only outer and repeated whitespace is folded."""
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


def key_parts(req: ChatRequest, fingerprint: str, knowledge_version: str) -> KeyParts:
    """The exact-match key of a request and its context hash."""
    context = _digest({
        "schema": KEY_SCHEMA,
        "system": _normalize_prompt(req.system_prompt),
        "route": req.route_name,
        "route_header": (req.route_header or "").strip().lower() or None,
        "fingerprint": fingerprint,
        "generation": generation_settings(req),
        "knowledge": knowledge_version,
    })
    question = normalize_text(req.last_user_message)
    key = _digest({"context": context, "question": question})
    return KeyParts(question=question, context=context, key=key)


def faq_key(question: str) -> str:
    """FAQ answers are the operator's truth for every model, prompt and setting: keyed by question alone.

    Loading a newer pack replaces the older one's entries, so no knowledge version is needed here.
    """
    return _digest({"schema": KEY_SCHEMA, "faq": normalize_text(question)})


__all__ = ["KEY_SCHEMA", "KeyParts", "faq_key", "generation_settings", "key_parts", "normalize_text"]
