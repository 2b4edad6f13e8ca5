"""The difficulty-cue scan as it was before its rewrite, kept as the specification for
``models.intent.cues.cue_tokens`` (see ``reference_features``): one loop step per word. The domain
vocabularies and each version's word tables are the module's own, imported; the Chinese terms are one plain
alternation, without the module's first-character prefilter."""

from __future__ import annotations

import re
from functools import cache

from models.intent.cues import _CJK_RE, _EN_WORD_RE, CUE_VERSION, TABLES, CueTables, _vocabulary, zh_alternation


@cache
def _zh_re(version: int) -> re.Pattern[str]:
    return re.compile(zh_alternation(_vocabulary(version)))


def _phrase_cues(words: list[str], t: CueTables) -> set[str]:
    """Domains whose English phrases occur as whole words, left to right without overlap (the first
    phrase in domain order wins at a position, and the scan resumes after it). A dictionary of first
    words instead of one regular expression over the joined text: the alternation of every phrase, tried
    at every space, cost a fifth of a kiosk request's feature time."""
    found: set[str] = set()
    i, n = 0, len(words)
    while i < n:
        step = 1
        for name, parts in t.phrases_by_first.get(words[i], ()):
            if tuple(words[i : i + len(parts)]) == parts:
                found.add(name)
                step = len(parts)
                break
        i += step
    return found


def cue_tokens(norm: str, version: int = CUE_VERSION) -> list[str]:
    """The cue tokens of a normalised text (``normalize`` in ``features``): ``cue:<domain>`` and ``number:<n>``."""
    t = TABLES[version]
    word_list = _EN_WORD_RE.findall(norm)
    found: set[str] = set()
    for word in word_list:
        hit = t.words.get(word)
        if hit:
            found.update(hit)
        if word.startswith(t.prefixes):
            found.update(name for prefix, name in t.prefix_cues if word.startswith(prefix))
    if word_list:
        found |= _phrase_cues(word_list, t)
    if _CJK_RE.search(norm) is not None:
        found.update(m.lastgroup for m in _zh_re(version).finditer(norm) if m.lastgroup)
    tokens = [f"cue:{name}" for name in t.names if name in found]
    numbers = len(set(t.number_re.findall(norm)))
    tokens.append(f"number:{min(numbers, 4)}")
    return tokens
