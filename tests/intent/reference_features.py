"""The feature function as it was before its one-pass rewrite, kept as the specification.

``models.intent.features.featurize`` must return exactly what this returns (same indices, same values,
same order): the shipped model was trained on these features. ``test_features_equivalence`` checks it
on every shipped text.
"""

from __future__ import annotations

import math
import re
import unicodedata
import zlib
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from models.intent.ask import final_ask
from tests.intent.reference_cues import cue_tokens

FEATURE_VERSION = 3
# Version 2 models (whole message only) still load: their card has no ask view and ``featurize`` skips it.
SUPPORTED_VERSIONS = (2, 3)

# Style punctuation: removed so that it cannot become a label signal. '.' is only removed at a sentence
# end (it means something inside "3.14" or "os.path").
_STYLE_RE = re.compile(r"[?!,;¿¡、，；？！。~～…]+|\.(?=\s|$)")
_SPACE_RE = re.compile(r"\s+")
_WORD_RE = re.compile(r"[a-z0-9_]+")
_CJK, _LATIN, _DIGIT, _MATH, _CODE = 1, 2, 4, 8, 16


def _char_classes() -> np.ndarray:
    """One lookup table of character-class bits for the BMP: counting with it is one numpy gather instead
    of five regex scans over the text (the scans cost more than the whole ONNX run)."""
    table = np.zeros(0x10000, dtype=np.uint8)
    for lo, hi in ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF)):
        table[lo : hi + 1] |= _CJK
    table[ord("a") : ord("z") + 1] |= _LATIN
    table[ord("0") : ord("9") + 1] |= _DIGIT
    for c in "=+-*/^<>%√∫∑∏π∞≤≥≠×÷∠△°\\$|":
        table[ord(c)] |= _MATH
    for c in "{}[]()_#`&@":
        table[ord(c)] |= _CODE
    table.setflags(write=False)
    return table


_CLASS_TABLE = _char_classes()
# _BIT_COUNTS[v, j] is 1 when flag value v has class bit j (CJK, LATIN, DIGIT, MATH, CODE).
_BIT_COUNTS = np.array([[(v >> j) & 1 for j in range(5)] for v in range(32)], dtype=np.int64)

_U = np.uint64
_FNV_PRIME = _U(0x100000001B3)
_NS_CHAR = 0x9E3779B97F4A7C15
_NS_WORD = 0xC2B2AE3D27D4EB4F
_NS_BIGRAM = 0x165667B19E3779F9
_NS_META = 0x27D4EB2F165667C5
_NS_ASK = 0x85EBCA77C2B2AE63  # the final ask's features live in their own part of the hash space
_MASK64 = (1 << 64) - 1
_SIGN_BIT = _U(1 << 63)


@dataclass(frozen=True)
class FeatureConfig:
    """The hashing parameters. Stored in the model card so a runtime can refuse a mismatched model."""

    dim: int = 1 << 18
    char_ngrams: tuple[int, ...] = (1, 2, 3, 4)
    max_chars: int = 600
    meta_weight: float = 0.5
    # Text features are divided by (sum of squares) ** norm_power: 0.5 is the L2 norm; larger values make
    # the score closer to the *average* n-gram weight, so a long text is not more extreme than a short one.
    norm_power: float = 0.5
    # Version 3: the final ask (``models.intent.ask``) is featurised again in its own hash namespace with
    # this weight, and the whole message's text features are scaled by ``whole_weight``.
    ask_weight: float = 1.0
    whole_weight: float = 0.25
    cue_weight: float = 1.0  # difficulty cues (``models.intent.cues``) of the whole message and of the ask
    version: int = FEATURE_VERSION

    def to_dict(self) -> dict:
        data = {
            "dim": self.dim,
            "char_ngrams": list(self.char_ngrams),
            "max_chars": self.max_chars,
            "meta_weight": self.meta_weight,
            "norm_power": self.norm_power,
            "version": self.version,
        }
        if self.version >= 3:
            data["ask_weight"] = self.ask_weight
            data["whole_weight"] = self.whole_weight
            data["cue_weight"] = self.cue_weight
        return data

    @classmethod
    def from_dict(cls, data: dict) -> FeatureConfig:
        version = int(data.get("version", FEATURE_VERSION))
        if version not in SUPPORTED_VERSIONS:
            raise ValueError(f"model uses feature version {version}, runtime implements {SUPPORTED_VERSIONS}")
        return cls(
            dim=int(data["dim"]),
            char_ngrams=tuple(int(n) for n in data["char_ngrams"]),
            max_chars=int(data["max_chars"]),
            meta_weight=float(data["meta_weight"]),
            norm_power=float(data.get("norm_power", 0.5)),
            ask_weight=float(data.get("ask_weight", 1.0)),
            whole_weight=float(data.get("whole_weight", 0.25)),
            cue_weight=float(data.get("cue_weight", 1.0)),
            version=version,
        )


def normalize(text: str) -> str:
    """NFKC, lower case, style punctuation removed, whitespace collapsed."""
    t = unicodedata.normalize("NFKC", text).lower()
    t = _STYLE_RE.sub(" ", t)
    return _SPACE_RE.sub(" ", t).strip()


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: spreads the rolling hash's low-entropy bits over all 64."""
    x = x ^ (x >> _U(30))
    x = x * _U(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U(27))
    x = x * _U(0x94D049BB133111EB)
    return x ^ (x >> _U(31))


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


# (seed_n * prime) mod 2**64 for each n-gram order: the first round of the rolling hash, precomputed.
_CHAR_SEEDS = {n: ((_NS_CHAR * n) & _MASK64) * 0x100000001B3 & _MASK64 for n in range(1, 9)}


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


def _bucket(value: float, edges: tuple[float, ...]) -> int:
    """The index of the first edge above ``value`` (len(edges) when none is)."""
    return bisect_right(edges, value)


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
    cues = cue_tokens(norm)
    cues += ["ask:" + tok for tok in (cues if ask_norm is norm else cue_tokens(ask_norm))]
    # One pass over the cue and shape tokens (cues first), weighted apart.
    shape_idx, shape_val = _meta_block(cues + meta, config)
    shape_val[: len(cues)] = config.cue_weight
    text_idx = _index(np.concatenate([text_hash, _mix(ask_hash ^ _U(_NS_ASK))]), config.dim)
    return (np.concatenate([text_idx, shape_idx]),
            np.concatenate([text_val * config.whole_weight, ask_val * config.ask_weight, shape_val]).astype(np.float32))


def _index(hashes: np.ndarray, dim: int) -> np.ndarray:
    """Feature indices of mixed hashes: ``hash % dim`` (a mask when ``dim`` is a power of two, same result)."""
    if dim & (dim - 1) == 0:
        return (hashes & _U(dim - 1)).astype(np.int64)
    return (hashes % _U(dim)).astype(np.int64)
