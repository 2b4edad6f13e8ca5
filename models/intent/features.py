"""Text -> sparse hashed feature vector, with numpy and the standard library, and this package's C module.

The C module (``_textfeatures.c``, built at install) computes the integer half of the text features; where it
was not built, numpy computes the same numbers (``_text_features_numpy``), slower. Nothing else is needed.

Why hashing instead of a fitted vocabulary: the runtime then needs no vocabulary file and no sklearn, the
feature space is fixed (so the ONNX graph is just a weight vector), and the same function is used by the
trainer and the kiosk, so there is no train/serve skew. Every hash here is stable across processes and
machines (FNV-style rolling hash on code points, CRC-32 for word tokens, a splitmix64 finaliser); Python's
``hash()`` is salted per process and is never used.

Why the normalisation: the shared data is confounded by style (crowd-sourced queries are lower-case with no
'?', exam questions use full-width punctuation). NFKC + lower-casing + dropping '?', '!', commas and
sentence-final full stops removes those shortcuts before any feature sees the text, so the model has to
learn from the words.
"""

from __future__ import annotations

import math
import re
import unicodedata
import zlib
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

import numpy as np

from models.intent.ask import final_ask
from models.intent.cues import cue_tokens

try:  # the integer half of the text features in C, built at install where a compiler is (pyproject.toml)
    from models.intent import _textfeatures
except ImportError:  # pragma: no cover - no compiler at install: numpy's spelling (the tests run both)
    _textfeatures = None


def implementation() -> str:
    """Which spelling computes the text features and cues: "C" (``_textfeatures``, built at install) or
    "python" (numpy and ``re``: the same numbers, slower; the module was not built)."""
    return "C" if _textfeatures is not None else "python"


# Feature version -> the cue vocabulary it reads (``models.intent.cues``): the one table of the versions this
# runtime loads. Version 2 models (whole message only) still load: their card has no ask view and ``featurize``
# skips the ask and the cues. Versions 4 and 5 are version 3's layout read with the second and the third
# vocabulary. A vocabulary is a feature version of its own, not only a card field, so that a runtime older than
# the vocabulary refuses such a model (its version check) instead of featurising it with cues it was not
# trained on.
_CUE_VOCABULARY = {2: 1, 3: 1, 4: 2, 5: 3}
SUPPORTED_VERSIONS = tuple(_CUE_VOCABULARY)
FEATURE_VERSION = max(SUPPORTED_VERSIONS)  # what the trainer writes

# Style punctuation: removed so that it cannot become a label signal. '.' is only removed at a sentence
# end (it means something inside "3.14" or "os.path").
_STYLE_RE = re.compile(r"[?!,;¿¡、，；？！。~～…]+|\.(?=\s|$)")
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

# 1 + log(k) for every k a capped kiosk message's view can count (index 0 is never read): a gather instead of a
# log and an addition per request. The values are computed by np.log, as the lookup's fallback computes them.
_ONE_PLUS_LOG = 1.0 + np.log(np.maximum(np.arange(1 << 13), 1).astype(np.float64))
_ONE_PLUS_LOG.setflags(write=False)

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

    @property
    def cue_version(self) -> int:
        """The cue vocabulary this feature version reads (``_CUE_VOCABULARY``)."""
        return _CUE_VOCABULARY[self.version]

    def to_dict(self) -> dict:
        data = {
            "dim": self.dim,
            "char_ngrams": list(self.char_ngrams),
            "max_chars": self.max_chars,
            "meta_weight": self.meta_weight,
            "norm_power": self.norm_power,
            "version": self.version,
            "cue_version": self.cue_version,
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
        config = cls(
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
        if "cue_version" in data and int(data["cue_version"]) != config.cue_version:
            raise ValueError(f"model card names cue vocabulary {data['cue_version']} with feature version {version}, "
                             f"which reads vocabulary {config.cue_version}")
        return config


def normalize(text: str) -> str:
    """NFKC, lower case, style punctuation removed, whitespace collapsed."""
    t = unicodedata.normalize("NFKC", text).lower()
    # ``split()`` splits where ``\s`` matches (both ask ``str.isspace``): ``\s+`` -> " " and a strip, in C.
    return " ".join(_STYLE_RE.sub(" ", t).split())


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: spreads the rolling hash's low-entropy bits over all 64."""
    x = x ^ (x >> _U(30))
    x = x * _U(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U(27))
    x = x * _U(0x94D049BB133111EB)
    return x ^ (x >> _U(31))


# (seed_n * prime) mod 2**64 for each n-gram order: the first round of the rolling hash, precomputed.
_CHAR_SEEDS = {n: ((_NS_CHAR * n) & _MASK64) * 0x100000001B3 & _MASK64 for n in range(1, 9)}


def _mix_inplace(x: np.ndarray) -> None:
    """``_mix`` written into ``x`` itself: the same arithmetic, no temporaries kept."""
    x ^= x >> _U(30)
    x *= _U(0xBF58476D1CE4E5B9)
    x ^= x >> _U(27)
    x *= _U(0x94D049BB133111EB)
    x ^= x >> _U(31)


def _crc_pair(token: str, ns: int) -> int:
    """CRC-32 pair of one token: the high half seeded with the namespace."""
    data = token.encode("utf-8")
    return (zlib.crc32(data, ns) << 32) | zlib.crc32(data)


class _Memo(dict[str, int]):
    """A bounded memo of a pure one-argument function, read with ``map(memo.__getitem__, keys)``.

    Why not ``lru_cache``: a dict's own ``__getitem__`` mapped over a request's words runs in C, with no
    Python frame per word, which is what a word costs when kiosk text reuses a small vocabulary. When
    full it is emptied (the vocabulary refills it), so memory stays bounded.
    """

    def __init__(self, function: Callable[[str], int], limit: int) -> None:
        super().__init__()
        self._function = function
        self._limit = limit

    def __missing__(self, key: str) -> int:
        if len(self) >= self._limit:
            self.clear()
        value = self[key] = self._function(key)
        return value


_WORD_HASHES = _Memo(lambda word: _crc_pair(word, _NS_WORD & 0xFFFFFFFF), 1 << 16)


@lru_cache(maxsize=4096)
def _shape_index(token: str, dim: int) -> int:
    """The feature index of one shape or cue token. These tokens come from a small closed set (bucket
    names), so each is hashed once per process instead of once per request (a memo of a pure function)."""
    mixed = _mix(np.array([_crc_pair(token, _NS_META & 0xFFFFFFFF)], dtype=np.uint64))
    return int(mixed[0] % _U(dim))


@lru_cache(maxsize=16)
def _ngram_plan(char_ngrams: tuple[int, ...]) -> tuple[list[int], list[tuple[int, int]], dict[int, int], np.ndarray]:
    """What the configuration's n-gram orders fix, worked out once: the orders ascending, each round k of
    the rolling hash with the first row (order) it applies to, each order's row, and the first-round seed
    of each order as a column to broadcast over the code points."""
    orders = sorted(set(char_ngrams))
    rounds = [(k, bisect_right(orders, k)) for k in range(1, orders[-1])]
    seeds = np.array([[_CHAR_SEEDS[n]] for n in orders], dtype=np.uint64)
    seeds.setflags(write=False)
    return orders, rounds, {n: i for i, n in enumerate(orders)}, seeds


def _bucket(value: float, edges: tuple[float, ...]) -> int:
    """The index of the first edge above ``value`` (len(edges) when none is)."""
    return bisect_right(edges, value)


def _shape_tokens(n_chars: int, classes: list[int], lines: int, n_words: int) -> list[str]:
    """Coarse shape features as one-hot bucket tokens (length, lines, digits, maths and code symbols, script).

    Buckets rather than raw numbers so a linear model can learn non-monotonic effects (very short requests
    are not automatically simple: "prove sqrt(2) is irrational" is short). ``classes`` counts the
    normalised text's CJK, Latin, digit, maths and code characters.
    """
    n = max(n_chars, 1)
    cjk, latin, digits, maths, code = classes
    words = n_words + cjk
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


@dataclass(frozen=True)
class _Views:
    """The text features of the views of one request (the whole message, the final ask), computed together.

    ``hashes[bounds[i]:bounds[i + 1]]`` are view i's distinct mixed hashes in ascending order and
    ``values[...]`` the same slice's signed, normalised sublinear tf; ``classes[i]`` counts view i's CJK,
    Latin, digit, maths and code characters.
    """

    hashes: np.ndarray
    values: np.ndarray
    bounds: list[int]
    classes: list[list[int]]


def _views(norms: list[str], words: list[list[str]], config: FeatureConfig) -> _Views:
    """The char n-grams, words and word bigrams of every view, hashed, counted and normalised in one pass of
    numpy (the spelling ``_text_features_numpy`` runs where the C module was not built).

    Each view on its own gets what it always got (``tests/intent/reference_features.py`` is the
    specification): the rolling hash of each n-gram order over ``" " + norm + " "``, the CRC pair of each
    word and a hash of each pair of words, all mixed; then the distinct hashes with 1 + log(count), divided
    by (sum of squares) ** norm_power and signed by the hash's top bit. Why one pass: for a kiosk request
    the arrays hold a few hundred numbers and numpy costs per call, not per number. Here the views share
    every call: all n-gram orders are rows of one 2-D array, all views are segments of one buffer, and the
    character classes of the shape tokens come from the same code points.
    """
    orders, rounds, row, seeds = _ngram_plan(config.char_ngrams)
    top = orders[-1]
    padded = [f" {norm} " for norm in norms]
    starts = [0]
    for text in padded:
        starts.append(starts[-1] + len(text))
    total = starts[-1]
    # Every padded view end to end, then top - 1 NULs so that each shifted slice below has ``total``
    # numbers; the windows that run past a view's end are computed and never read.
    cps32 = np.frombuffer(("".join(padded) + "\0" * (top - 1)).encode("utf-32-le"), dtype="<u4")
    cps = cps32.astype(np.uint64)
    grams = cps[None, :total] ^ seeds
    for k, first in rounds:  # the rows from ``first`` on (the orders above k) take round k
        grams[first:] *= _FNV_PRIME
        grams[first:] ^= cps[k : k + total]

    flat = [word for view_words in words for word in view_words]
    word_hashes = np.fromiter(map(_WORD_HASHES.__getitem__, flat), dtype=np.uint64, count=len(flat))
    pairs = (word_hashes[:-1] * _FNV_PRIME) ^ word_hashes[1:] ^ _U(_NS_BIGRAM)

    parts: list[np.ndarray] = []
    seg = [0]
    w0 = 0
    for v, view_words in enumerate(words):
        lo, size = starts[v], starts[v + 1] - starts[v]
        length = 0
        for n in config.char_ngrams:
            if size >= n:
                parts.append(grams[row[n], lo : lo + size - n + 1])
                length += size - n + 1
        nw = len(view_words)
        if nw:
            parts.append(word_hashes[w0 : w0 + nw])
            if nw > 1:
                parts.append(pairs[w0 : w0 + nw - 1])  # never the pair across two views
            length += 2 * nw - 1
        w0 += nw
        seg.append(seg[-1] + length)

    mixed = np.concatenate(parts)
    _mix_inplace(mixed)
    for a, b in pairwise(seg):
        mixed[a:b].sort()
    # np.unique(..., return_counts=True) per view, spelt out: a run starts where the hash changes and
    # at every view's first number, so equal hashes of two views are never counted together.
    count = seg[-1]
    first_of_run = np.empty(count + 1, dtype=bool)
    np.not_equal(mixed[1:], mixed[:-1], out=first_of_run[1:count])
    first_of_run[seg] = True
    runs = np.flatnonzero(first_of_run)
    hashes = mixed[runs[:-1]]
    counts = runs[1:] - runs[:-1]
    # 1 + log(count), looked up: no count exceeds the numbers counted, and the table holds np.log's own values.
    values = _ONE_PLUS_LOG[counts] if count < len(_ONE_PLUS_LOG) else 1.0 + np.log(counts)
    bounds = np.searchsorted(runs, seg).tolist()
    for a, b in pairwise(bounds):
        view = values[a:b]
        view /= np.dot(view, view) ** config.norm_power
    np.negative(values, out=values, where=hashes >= _SIGN_BIT)

    # Character classes per view: one gather, and one histogram with view i's flags moved up by 32 * i.
    flags = _CLASS_TABLE[np.minimum(cps32, 0xFFFF)]  # astral characters fall on U+FFFF: no class
    for lo in starts[1:-1]:
        flags[lo:] += 32
    nv = len(norms)
    hist = np.bincount(flags, minlength=32 * nv)[: 32 * nv].reshape(nv, 32)
    return _Views(hashes, values, bounds, (hist @ _BIT_COUNTS).tolist())


def _twice(views: _Views) -> _Views:
    """One view as two: the ask that is the whole message gets a copy, not a second computation."""
    u = views.bounds[1]
    return _Views(np.concatenate([views.hashes, views.hashes]), np.concatenate([views.values, views.values]),
                  [0, u, 2 * u], views.classes * 2)


@dataclass(frozen=True)
class _TextFeatures:
    """The text features of a request's views: view i's are ``indices[bounds[i]:bounds[i + 1]]`` with their
    normalised, signed ``values`` (not yet weighted); ``classes[i]`` counts view i's CJK, Latin, digit,
    maths and code characters."""

    indices: np.ndarray  # int64
    values: np.ndarray  # float64
    bounds: list[int]
    classes: list[list[int]]


def _text_features(norms: list[str], words: list[list[str]], config: FeatureConfig) -> _TextFeatures:
    """The views' features, the second view (the final ask, from version 3) in the ask's part of the hash
    space. ``norms[1] is norms[0]`` says the ask is the whole message.

    In C (``_textfeatures``) where that module was built, else in numpy (``_text_features_numpy``): the same
    indices and the same bits of every value. The C module does the integer half (hashes, counts, signs,
    indices) and copies the values from ``_ONE_PLUS_LOG``; the floating-point normalisation is numpy's in
    both, below, so no value can differ by a rounding.
    """
    out = _text_features_c(norms, words, config) if _textfeatures is not None else None
    if out is None:
        return _text_features_numpy(norms, words, config)
    twice = _ask_is_whole(norms)
    for a, b in pairwise(out.bounds[:2] if twice else out.bounds):  # signed already: the same squares, quotients
        view = out.values[a:b]
        view /= np.dot(view, view) ** config.norm_power
    if twice:  # the ask's copy of the one view: its values once normalised, as the numpy spelling's copy
        out.values[out.bounds[1] :] = out.values[: out.bounds[1]]
    return out


def _ask_is_whole(norms: list[str]) -> bool:
    """The final ask is the whole message (``featurize`` passes its norm twice): one view to compute, copied."""
    return len(norms) == 2 and norms[1] is norms[0]


def _text_features_c(norms: list[str], words: list[list[str]], config: FeatureConfig) -> _TextFeatures | None:
    """The C module's features before normalisation; None where it declines (a lone surrogate, which numpy's
    spelling reports as its UnicodeEncodeError; more numbers than ``_ONE_PLUS_LOG`` holds)."""
    twice = _ask_is_whole(norms)
    if twice:
        norms, words = norms[:1], words[:1]
    padded = [f" {norm} " for norm in norms]
    text = "".join(padded)
    starts = [0]
    for view in padded:
        starts.append(starts[-1] + len(view))
    flat = [word for view_words in words for word in view_words]
    room = (len(text) * len(config.char_ngrams) + 2 * len(flat)) * (1 + twice)  # at least the numbers hashed
    indices = np.empty(room, dtype=np.int64)
    values = np.empty(room, dtype=np.float64)
    out = _textfeatures.text_features(text, starts, flat, [len(w) for w in words], config.char_ngrams,
                                      _CLASS_TABLE, _ONE_PLUS_LOG, 1, config.dim, twice, indices, values)
    if out is None:
        return None
    bounds, classes = out
    return _TextFeatures(indices[: bounds[-1]], values[: bounds[-1]], bounds, classes)


def _text_features_numpy(norms: list[str], words: list[list[str]], config: FeatureConfig) -> _TextFeatures:
    """``_text_features`` in numpy: the specification of ``_textfeatures.c``, and what runs where it was not
    built. The ask's hashes move to their own part of the space after their signs were taken."""
    if _ask_is_whole(norms):
        views = _twice(_views(norms[:1], words[:1], config))
    else:
        views = _views(norms, words, config)
    if len(views.bounds) > 2:
        ask_hashes = views.hashes[views.bounds[1] :]
        ask_hashes ^= _U(_NS_ASK)
        _mix_inplace(ask_hashes)
    indices = np.empty(len(views.hashes), dtype=np.int64)
    if config.dim & (config.dim - 1) == 0:  # ``_index`` written straight into the output: indices < 2**63
        np.bitwise_and(views.hashes, _U(config.dim - 1), out=indices.view(np.uint64))
    else:
        indices[:] = _index(views.hashes, config.dim)
    return _TextFeatures(indices, views.values, views.bounds, views.classes)


def _shape_indices(tokens: list[str], dim: int) -> list[int]:
    return [_shape_index(token, dim) for token in tokens]


def featurize(text: str, config: FeatureConfig) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(indices int64, values float32)`` of the sparse feature vector of ``text``.

    Indices may repeat (hash collisions); the consumer sums them (the ONNX graph does Gather + ReduceSum,
    scipy sums duplicates). Text features are sublinear-tf, signed, L2-normalised; shape tokens are added
    with a fixed weight outside that normalisation so that long texts do not drown them. From version 3
    the final ask gets a block of its own (text features and shape tokens), so a short easy question at
    the end of a long friendly message is seen as what it is. The order of the output is fixed: the
    whole message's text features, the ask's, the cue tokens, the shape tokens.
    """
    if len(text) > config.max_chars:
        # Long pastes: only the head and tail are read at all. Normalising and scanning the whole of a
        # 27,000-character paste costs milliseconds; the request usually sits at one end of it. The shape
        # tokens see the capped text too, so every long paste lands in the same length bucket.
        half = config.max_chars // 2
        text = text[:half] + "\n" + text[-half:]
    norm = normalize(text)
    words = _WORD_RE.findall(norm)
    if config.version < 3:
        features = _text_features([norm], [words], config)
        shape = _shape_tokens(len(norm), features.classes[0], text.count("\n"), len(words))
        return _assemble(features, (1.0,), _shape_indices(shape, config.dim), [], config)
    ask = final_ask(text)
    same = ask == text.strip()  # one short ask: the same features again, in the ask's part of the space
    if same:
        ask_norm, ask_words = norm, words
    else:
        ask_norm = normalize(ask)
        ask_words = _WORD_RE.findall(ask_norm)
    features = _text_features([norm, ask_norm], [words, ask_words], config)
    shape = _shape_tokens(len(norm), features.classes[0], text.count("\n"), len(words))
    ask_shape = shape if same else _shape_tokens(len(ask_norm), features.classes[1], ask.count("\n"), len(ask_words))
    share = len(ask_norm) / max(len(norm), 1)
    shape = [*shape, *("ask:" + tok for tok in ask_shape), f"ask_share:{_bucket(share, (0.2, 0.4, 0.7, 0.95))}"]
    cues = cue_tokens(norm, config.cue_version)
    cues += ["ask:" + tok for tok in (cues if same else cue_tokens(ask_norm, config.cue_version))]
    return _assemble(features, (config.whole_weight, config.ask_weight), _shape_indices(shape, config.dim),
                     _shape_indices(cues, config.dim), config)


def _assemble(features: _TextFeatures, weights: tuple[float, ...], shape: list[int], cues: list[int],
              config: FeatureConfig) -> tuple[np.ndarray, np.ndarray]:
    """The output arrays: text features (each view times its weight), then cue and shape tokens."""
    values = features.values
    for weight, (a, b) in zip(weights, pairwise(features.bounds), strict=True):
        if weight != 1.0:
            values[a:b] *= weight
    n_text, n_cues = len(values), len(cues)
    indices = np.empty(n_text + n_cues + len(shape), dtype=np.int64)
    indices[:n_text] = features.indices
    indices[n_text:] = cues + shape
    out = np.empty(len(indices), dtype=np.float32)
    out[:n_text] = values
    out[n_text : n_text + n_cues] = config.cue_weight
    out[n_text + n_cues :] = config.meta_weight
    return indices, out


def _index(hashes: np.ndarray, dim: int) -> np.ndarray:
    """Feature indices of mixed hashes: ``hash % dim`` (a mask when ``dim`` is a power of two, same result)."""
    if dim & (dim - 1) == 0:
        return (hashes & _U(dim - 1)).astype(np.int64)
    return (hashes % _U(dim)).astype(np.int64)
