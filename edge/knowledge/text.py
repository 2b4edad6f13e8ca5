"""Text to retrieval features: English words (light stemming, typo repair) and Chinese n-grams.

Why this shape, and not a segmenter or a sub-word model:
- Chinese has no spaces; character unigrams plus bigrams match "洗手间" inside "洗手间在哪里" without
  a dictionary (jieba would add 50 MB and a start-up cost for no better recall on short facts).
- Visitors type on a touch screen: "tiolet", "elevater", "parkng". An out-of-vocabulary word is
  mapped to a pack word one edit away (symmetric deletes, as SymSpell does), so a typo costs a
  dictionary lookup, not a character n-gram index ten times the size of the word index.
- Function words and chatty filler ("hi, sorry, could you tell me") carry no evidence; they are
  dropped, otherwise a polite question would look less covered than a curt one.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# "h&m", "at&t": letters joined by '&' are one name, not two dropped single letters.
_TOKEN = re.compile(f"[{_CJK}]+|[^\\W_{_CJK}]+(?:&[^\\W_{_CJK}]+)*", re.UNICODE)
_CJK_RUN = re.compile(f"^[{_CJK}]+$")

# Words that carry no evidence about which fact is meant (questions, politeness, chat).
STOPWORDS = frozenset("""
a about above after again all also am an and any anyone anything anywhere are around as at be been before
being below between both but by can could did do does doing down during each else few for from further get
got had has have having he her here hers herself him himself his how i if in into is it its itself just
know let like me might more most much must my myself near need needs no nor not now of off on once only or
other our ours out over own please pls plz really right said same say she should so some someone something
sorry still such tell than thank thanks that the their theirs them then there these they this those
through to too u under until up us very want wanna was way we were what whats when where which while who
whom why will with would ya yeah yes you your yours hi hey hello ok okay guys wondering looking find go
going im ive youre thats theres dont doesnt cant isnt arent whats wheres hows s t d ll m re ve
""".split())
# Chinese characters and pairs that only make a sentence polite or interrogative.
CJK_STOP_CHARS = frozenset("的了吗呢啊呀吧么嘛哦哈请问你我他她它们是在有和与及或就都也还要想去到这那哪里儿个"
                           "怎样什几些点多少谁呐")
CJK_STOP_BIGRAMS = frozenset({"请问", "你好", "哪里", "在哪", "什么", "怎么", "可以", "这里", "那里", "哪儿",
                              "多少", "有没", "没有", "是不", "不是", "一下", "知道", "告诉", "谢谢", "麻烦",
                              "几点", "几楼", "附近"})

UNIGRAM_WEIGHT = 0.4  # a single Chinese character is weaker evidence than a pair
REPAIRED_WEIGHT = 0.8  # a typo-repaired word is probably, not certainly, the pack's word


def fold(text: str) -> str:
    """Compatibility forms (full-width letters, digits) and case folded away."""
    return unicodedata.normalize("NFKC", text).casefold()


def stem(word: str) -> str:
    """A deliberately light English stemmer: plural, -ing, -ed, a final e, doubled consonants.

    Both the pack and the question go through it, so it only has to be consistent, not correct:
    close/closes/closing/closed -> clos, shopping -> shop, toilets -> toilet.
    """
    if len(word) <= 3 or not word.isascii() or not word.isalpha():
        return word
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            word = word[: -len(suffix)]
            break
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouls":
        word = word[:-1]
    return word


def raw_tokens(text: str) -> list[str]:
    """Folded tokens in order: Latin/digit words and whole Chinese runs."""
    return _TOKEN.findall(fold(text).replace("'", "").replace("’", ""))


@dataclass(frozen=True)
class Feature:
    """One query or document feature: ``w:<stem>``, ``c:<char>`` or ``b:<pair>``."""

    name: str
    weight: float
    counted: bool  # part of the coverage denominator even when the pack does not know it


def cjk_features(run: str) -> list[Feature]:
    out: list[Feature] = []
    for ch in run:
        if ch not in CJK_STOP_CHARS:
            out.append(Feature(f"c:{ch}", UNIGRAM_WEIGHT, True))
    for i in range(len(run) - 1):
        pair = run[i : i + 2]
        if pair in CJK_STOP_BIGRAMS or pair[0] in CJK_STOP_CHARS or pair[1] in CJK_STOP_CHARS:
            continue
        # A pair the pack has never seen ("医院" in a mall without a clinic) is missing evidence,
        # exactly like an unknown English word; pairs touching a filler character are skipped.
        out.append(Feature(f"b:{pair}", 1.0, True))
    return out


def document_features(text: str) -> list[str]:
    """Every feature of a chunk (repeats kept: BM25 counts them)."""
    out: list[str] = []
    for token in raw_tokens(text):
        if _CJK_RUN.match(token):
            out.extend(f.name for f in cjk_features(token))
        elif token not in STOPWORDS and (len(token) > 1 or token.isdigit()):
            out.append(f"w:{stem(token)}")
    return out


def surface_words(text: str) -> list[str]:
    """The unstemmed content words of a text: the dictionary that typos are repaired against."""
    return [t for t in raw_tokens(text) if not _CJK_RUN.match(t) and t not in STOPWORDS and len(t) >= 3
            and t.isalpha()]


def deletes(word: str) -> set[str]:
    """The word with one character removed, each way (SymSpell's symmetric-delete keys)."""
    return {word[:i] + word[i + 1 :] for i in range(len(word))}


class Speller:
    """Maps an unknown word to a pack word at most one edit away (insert, delete, replace, swap)."""

    def __init__(self, words: dict[str, int]) -> None:
        # Surface word -> how many chunks use it. Stop words are candidates too (at frequency 0), so
        # "wher" becomes "where" and is dropped instead of being "repaired" into some pack word.
        self._freq = {**{w: 0 for w in STOPWORDS if len(w) >= 3}, **words}
        self._by_delete: dict[str, list[str]] = {}
        for word in self._freq:
            if len(word) < 3:
                continue
            for key in deletes(word) | {word}:
                self._by_delete.setdefault(key, []).append(word)

    def correct(self, word: str) -> str | None:
        if len(word) < 3 or word in self._freq:
            return None
        candidates: set[str] = set(self._by_delete.get(word, ()))  # the visitor dropped a letter
        for key in deletes(word):  # added, replaced or swapped one
            candidates.update(self._by_delete.get(key, ()))
        candidates.discard(word)
        if not candidates:
            return None
        if candidates & STOPWORDS:
            return min(candidates & STOPWORDS)
        return max(sorted(candidates), key=lambda w: self._freq.get(w, 0))


def query_features(text: str, known: set[str] | dict[str, int], speller: Speller | None) -> list[Feature]:
    """The features of a question; unknown English words are repaired when the speller can."""
    out: list[Feature] = []
    for token in raw_tokens(text):
        if _CJK_RUN.match(token):
            out.extend(cjk_features(token))
            continue
        if token in STOPWORDS or (len(token) < 2 and not token.isdigit()):
            continue
        name = f"w:{stem(token)}"
        if name not in known and speller is not None and token.isalpha():
            fixed = speller.correct(token)
            if fixed is not None and fixed in STOPWORDS:
                continue
            if fixed is not None and f"w:{stem(fixed)}" in known:
                out.append(Feature(f"w:{stem(fixed)}", REPAIRED_WEIGHT, True))
                continue
        out.append(Feature(name, 1.0, True))
    return out


__all__ = ["Feature", "Speller", "document_features", "fold", "query_features", "raw_tokens", "stem",
           "surface_words"]
