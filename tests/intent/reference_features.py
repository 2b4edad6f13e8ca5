"""The feature function as it was before its one-pass rewrite, kept as the specification.

``models.intent.features.featurize`` must return exactly what this returns (same indices, same values,
same order): the shipped model was trained on these features. ``test_features_equivalence`` checks it
on the shipped texts. Only the computation that was rewritten is kept here (the n-gram, word and shape
blocks, one view at a time, and the normalisation's whitespace rule as a regular expression); what the
rewrites left alone (the configuration, the style punctuation, the hash constants, the final ask) is
imported, and a digest of the shipped texts' features in the same test guards those.
"""

from __future__ import annotations

import math
import re
import unicodedata
import zlib
from functools import lru_cache

import numpy as np

from models.intent.ask import final_ask
from models.intent.features import (
    _BIT_COUNTS,
    _CHAR_SEEDS,
    _CLASS_TABLE,
    _FNV_PRIME,
    _NS_ASK,
    _NS_BIGRAM,
    _NS_META,
    _NS_WORD,
    _SIGN_BIT,
    _STYLE_RE,
    _U,
    _WORD_RE,
    FeatureConfig,
    _bucket,
    _index,
    _mix,
)
from tests.intent.reference_cues import cue_tokens

_SPACE_RE = re.compile(r"\s+")


def normalize(text: str) -> str:
    """NFKC, lower case, style punctuation removed, whitespace collapsed."""
    t = unicodedata.normalize("NFKC", text).lower()
    t = _STYLE_RE.sub(" ", t)
    return _SPACE_RE.sub(" ", t).strip()


def _char_ngram_hashes(text: str, orders: tuple[int, ...]) -> list[np.ndarray]:
    cps = np.frombuffer((" " + text + " ").encode("utf-32-le"), dtype="<u4").astype(np.uint64)
    size = cps.shape[0]
    out = []
    for n in orders:
        if size < n:
            continue
        count = size - n + 1
        h = cps[:count] ^ _U(_CHAR_SEEDS[n])  # the first round of (seed * prime) ^ c, seed folded in
        for k in range(1, n):
            h *= _FNV_PRIME
            h ^= cps[k : k + count]
        out.append(h)
    return out


@lru_cache(maxsize=1 << 16)
def _token_hash(token: str, ns: int) -> int:
    """CRC-32 pair of one word. Memoised (a pure function): kiosk text reuses a small vocabulary, and a
    cache hit costs a fifth of hashing the word again."""
    data = token.encode("utf-8")
    return (zlib.crc32(data, ns) << 32) | zlib.crc32(data)


def _token_hashes(tokens: list[str], namespace: int) -> np.ndarray:
    ns = namespace & 0xFFFFFFFF
    return np.fromiter((_token_hash(t, ns) for t in tokens), dtype=np.uint64, count=len(tokens))


@lru_cache(maxsize=4096)
def _shape_index(token: str, dim: int) -> int:
    """The feature index of one shape or cue token. These tokens come from a small closed set (bucket
    names), so each is hashed once per process instead of once per request (a memo of a pure function)."""
    mixed = _mix(np.array([_token_hash(token, _NS_META & 0xFFFFFFFF)], dtype=np.uint64))
    return int(mixed[0] % _U(dim))


def meta_tokens(raw: str, norm: str, n_words: int | None = None) -> list[str]:
    """Coarse shape features as one-hot bucket tokens (length, lines, digits, maths and code symbols, script).

    Buckets rather than raw numbers so a linear model can learn non-monotonic effects (very short requests
    are not automatically simple: "prove sqrt(2) is irrational" is short).
    """
    n = max(len(norm), 1)
    cps = np.frombuffer(norm.encode("utf-32-le"), dtype="<u4")
    flags = _CLASS_TABLE[np.minimum(cps, 0xFFFF)]  # astral characters fall on U+FFFF: no class
    # One histogram of the flag values, then a count per class bit (one numpy pass, not five).
    cjk, latin, digits, maths, code = (int(c) for c in np.bincount(flags, minlength=32)[:32] @ _BIT_COUNTS)
    lines = raw.count("\n")
    words = (len(_WORD_RE.findall(norm)) if n_words is None else n_words) + cjk
    toks = [
        f"len:{_bucket(math.log2(n), (3, 4, 5, 6, 7, 8, 9, 10, 11))}",
        f"words:{_bucket(words, (3, 6, 10, 16, 25, 40, 70, 120))}",
        f"lines:{_bucket(lines, (1, 2, 4, 8, 16))}",
        f"digits:{_bucket(digits / n, (0.001, 0.03, 0.08, 0.2))}",
        f"math:{_bucket(maths, (1, 2, 4, 8, 16))}",
        f"code:{_bucket(code, (1, 2, 4, 8, 16))}",
    ]
    cjk_ratio = cjk / n
    latin_ratio = latin / n
    if cjk_ratio > 0.05 and latin_ratio > 0.05:
        toks.append("script:mixed")
    elif cjk_ratio > 0.05:
        toks.append("script:cjk")
    else:
        toks.append("script:latin")
    return toks


def _text_block(norm: str, config: FeatureConfig, words: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Mixed hashes of the char n-grams, words and word bigrams of one normalised text, and their values
    (sublinear tf, signed, normalised)."""
    parts = _char_ngram_hashes(norm, config.char_ngrams)
    if words:
        wh = _token_hashes(words, _NS_WORD)
        parts.append(wh)
        if len(wh) > 1:
            parts.append((wh[:-1] * _FNV_PRIME) ^ wh[1:] ^ _U(_NS_BIGRAM))
    # Never empty: the padded text always has unigrams and bigrams, even for "".
    # np.unique(..., return_counts=True), spelt out: its argument checks cost more than the sort itself.
    mixed = _mix(np.concatenate(parts))
    mixed.sort()
    starts = np.empty(mixed.shape[0] + 1, dtype=bool)
    starts[0] = starts[-1] = True
    np.not_equal(mixed[1:], mixed[:-1], out=starts[1:-1])
    bounds = np.flatnonzero(starts)
    hashes = mixed[bounds[:-1]]
    vals = 1.0 + np.log(np.diff(bounds).astype(np.float64))
    vals /= np.dot(vals, vals) ** config.norm_power
    vals[hashes >= _SIGN_BIT] *= -1.0
    return hashes, vals


def _meta_block(tokens: list[str], config: FeatureConfig) -> tuple[np.ndarray, np.ndarray]:
    idx = np.fromiter((_shape_index(t, config.dim) for t in tokens), dtype=np.int64, count=len(tokens))
    return idx, np.full(len(tokens), config.meta_weight, dtype=np.float64)


def featurize(text: str, config: FeatureConfig) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(indices int64, values float32)`` of the sparse feature vector of ``text``.

    Indices may repeat (hash collisions); the consumer sums them (the ONNX graph does Gather + ReduceSum,
    scipy sums duplicates). Text features are sublinear-tf, signed, L2-normalised; shape tokens are added
    with a fixed weight outside that normalisation so that long texts do not drown them. From version 3
    the final ask gets a block of its own (text features and shape tokens), so a short easy question at
    the end of a long friendly message is seen as what it is.
    """
    if len(text) > config.max_chars:
        # Long pastes: only the head and tail are read at all. Normalising and scanning the whole of a
        # 27,000-character paste costs milliseconds; the request usually sits at one end of it. The shape
        # tokens see the capped text too, so every long paste lands in the same length bucket.
        half = config.max_chars // 2
        text = text[:half] + "\n" + text[-half:]
    norm = normalize(text)
    words = _WORD_RE.findall(norm)
    text_hash, text_val = _text_block(norm, config, words)
    meta = meta_tokens(text, norm, len(words))
    if config.version < 3:
        shape_idx, shape_val = _meta_block(meta, config)
        return (np.concatenate([_index(text_hash, config.dim), shape_idx]),
                np.concatenate([text_val, shape_val]).astype(np.float32))
    ask = final_ask(text)
    if ask == text.strip():  # one short ask: the same features again, in the ask's part of the space
        ask_norm, ask_hash, ask_val, ask_meta = norm, text_hash, text_val, meta
    else:
        ask_norm = normalize(ask)
        ask_words = _WORD_RE.findall(ask_norm)
        ask_hash, ask_val = _text_block(ask_norm, config, ask_words)
        ask_meta = meta_tokens(ask, ask_norm, len(ask_words))
    share = len(ask_norm) / max(len(norm), 1)
    meta = [*meta, *("ask:" + tok for tok in ask_meta), f"ask_share:{_bucket(share, (0.2, 0.4, 0.7, 0.95))}"]
    cues = cue_tokens(norm, config.cue_version)
    cues += ["ask:" + tok for tok in (cues if ask_norm is norm else cue_tokens(ask_norm, config.cue_version))]
    # One pass over the cue and shape tokens (cues first), weighted apart.
    shape_idx, shape_val = _meta_block(cues + meta, config)
    shape_val[: len(cues)] = config.cue_weight
    text_idx = _index(np.concatenate([text_hash, _mix(ask_hash ^ _U(_NS_ASK))]), config.dim)
    return (np.concatenate([text_idx, shape_idx]),
            np.concatenate([text_val * config.whole_weight, ask_val * config.ask_weight, shape_val]).astype(np.float32))
