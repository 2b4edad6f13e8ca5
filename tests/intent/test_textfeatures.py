"""The C module ``models/intent/_textfeatures.c`` against the Python and numpy spelling it replaces, bit for bit:
its text features and its English cue scan.

``test_features_equivalence`` holds both spellings to the specification on the shipped texts; here random
text and random words (any code point but lone surrogates, astral ones, runs that fill one sort bucket, a
dimension that is not a power of two) check the two against each other, and the module's own guards are
driven: a bad argument is a ValueError or TypeError, never a crash, and where numpy's spelling must answer
(a lone surrogate, more numbers than the table of logarithms holds) the module declines.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.intent import features
from models.intent.cues import CUE_VERSIONS, TABLES, _count_numbers, _english_cues
from models.intent.features import (
    _CLASS_TABLE,
    _ONE_PLUS_LOG,
    FeatureConfig,
    _text_features,
    _text_features_c,
    _text_features_numpy,
    normalize,
)

textfeatures = features._textfeatures
CONFIGS = [FeatureConfig(), FeatureConfig(char_ngrams=(3, 1, 2)), FeatureConfig(dim=1000, char_ngrams=(2, 2, 5)),
           FeatureConfig(version=2)]
NO_SURROGATES = st.characters(exclude_categories=["Cs"])


def test_the_module_is_built() -> None:
    """``make venv`` compiles it (pyproject.toml's ext-modules); a kiosk without it runs numpy, slower."""
    assert textfeatures is not None, "models/intent/_textfeatures.c was not built: run `make venv` with a C compiler"


def _assert_same(norms: list[str], words: list[list[str]], config: FeatureConfig) -> None:
    c = _text_features(norms, words, config)
    ref = _text_features_numpy(norms, words, config)
    assert c.indices.dtype == ref.indices.dtype == np.int64 and c.values.dtype == ref.values.dtype == np.float64
    assert np.array_equal(c.indices, ref.indices)
    assert c.values.tobytes() == ref.values.tobytes()
    assert (c.bounds, c.classes) == (ref.bounds, ref.classes)


def _views_of(texts: list[str], config: FeatureConfig) -> tuple[list[str], list[list[str]]]:
    norms = [normalize(text) for text in texts[: 1 if config.version < 3 else 2]]
    return norms, [features._WORD_RE.findall(norm) for norm in norms]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(NO_SURROGATES, max_size=120) | st.text("ab 中文1+{", max_size=200), min_size=2, max_size=2),
       st.sampled_from(CONFIGS))
def test_c_and_numpy_give_the_same_features(texts: list[str], config: FeatureConfig) -> None:
    norms, words = _views_of(texts, config)
    _assert_same(norms, words, config)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.text(NO_SURROGATES, min_size=1, max_size=12), max_size=8), min_size=2, max_size=2))
def test_any_word_is_hashed_as_zlib_hashes_its_utf8(words: list[list[str]]) -> None:
    """The C module's CRC-32 is its own: any word (not only the ASCII ones the word pattern finds) must get
    the numbers of zlib's, which numpy's spelling uses."""
    _assert_same(["ab", "c"], words, FeatureConfig())


def test_the_ask_that_is_the_whole_message() -> None:
    """``featurize`` passes the same norm twice for it: both spellings compute one view and copy it into the
    ask's part of the hash space."""
    norm = normalize("Where is gate B12?")
    words = features._WORD_RE.findall(norm)
    ref = _text_features_numpy([norm, norm], [words, words], FeatureConfig())
    c = _text_features([norm, norm], [words, words], FeatureConfig())
    assert np.array_equal(c.indices, ref.indices) and c.values.tobytes() == ref.values.tobytes()
    half = ref.bounds[1]
    assert not np.array_equal(ref.indices[:half], ref.indices[half:])  # the ask's copy was moved


@pytest.mark.parametrize("text", ["x" * 600, "ab" * 300, "中" * 600, "𠀀😀" * 200, "", "a"])
def test_runs_that_fill_one_sort_bucket_and_tiny_views(text: str) -> None:
    """600 equal characters give one hash per order 600 times over: the sort's qsort fall-back."""
    norms, words = _views_of([text, text[:40]], FeatureConfig())
    _assert_same(norms, words, FeatureConfig())


def test_where_numpy_must_answer_the_module_declines() -> None:
    config = FeatureConfig()
    surrogate = normalize("where is \ud800 the gate")
    assert _text_features_c([surrogate], [["where"]], config) is None
    with pytest.raises(UnicodeEncodeError):
        features.featurize("where is \ud800 the gate", config)
    long = "ﷺ" * 600  # NFKC: 18 characters each, more n-grams than the table of logarithms
    norms, words = _views_of([long, long], config)
    assert _text_features_c(norms, words, config) is None


def _call(**change: object) -> object:
    args = {"text": " ab ", "starts": [0, 4], "words": ["ab"], "word_counts": [1], "orders": (1, 2),
            "table": _CLASS_TABLE, "logs": _ONE_PLUS_LOG, "remix_from": 1, "dim": 1 << 18, "twice": False,
            "indices": np.empty(16, dtype=np.int64), "values": np.empty(16, dtype=np.float64)}
    args.update(change)
    return textfeatures.text_features(*args.values())


@pytest.mark.parametrize("change", [
    {"starts": [0, 3]}, {"starts": [1, 4]}, {"starts": [0, 4, 2]}, {"word_counts": [2]}, {"words": ("ab",)},
    {"words": [b"ab"]}, {"orders": (0,)}, {"orders": (-1,)}, {"table": np.zeros(10, dtype=np.uint8)},
    {"logs": np.zeros(3, dtype=np.uint8)}, {"dim": 0}, {"indices": np.empty(2, dtype=np.int64)},
    {"values": np.empty(2, dtype=np.float64)}, {"twice": True, "values": np.empty(8, dtype=np.float64)},
    {"twice": True, "text": " ab  c ", "starts": [0, 4, 7], "word_counts": [1, 0]},
])
def test_bad_arguments_are_errors_not_crashes(change: dict) -> None:
    assert _call()[0] == [0, 7]  # the unchanged call works: " ab " has 3 + 3 distinct n-grams, and 1 word
    with pytest.raises((ValueError, TypeError)):
        _call(**change)


def test_read_only_output_is_refused() -> None:
    frozen = np.empty(16, dtype=np.int64)
    frozen.setflags(write=False)
    with pytest.raises((ValueError, TypeError, BufferError)):
        _call(indices=frozen)


# Numerals, separators, Chinese numerals and units, number words, cue words, prefixes and phrase words, and
# what may touch them (letters, digits, CJK, underscore, apostrophe, hyphen, plus, an accented letter).
_CUE_PIECES = ["two", "eighteen", "eight", "sixty", "hundred", "one", "3", "12.5", "1,000", ",", ".", " ", " ",
               "二", "十五", "个", "块", "楼", "x", "_", "é", "-", "'", "+", "٣", "prove", "theorem", "calcul",
               "python", "how", "to", "step", "by", "insurance", "claim", "which", "is", "better", "or", "should",
               "i", "choose", "big", "o", "dynamic", "programming", "ation"]


def _scan(norm: str, version: int) -> tuple[set[str], int]:
    t = TABLES[version]
    return textfeatures.cue_scan(norm, *t.scan_args)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_CUE_PIECES), max_size=16).map("".join) | st.text(NO_SURROGATES, max_size=60),
       st.sampled_from(CUE_VERSIONS))
def test_the_cue_scan_finds_what_the_python_spelling_finds(norm: str, version: int) -> None:
    t = TABLES[version]
    found, numbers = _scan(norm, version)
    assert found == _english_cues(norm, t)
    assert numbers == _count_numbers(norm, t) == len(set(t.number_re.findall(norm)))


@pytest.mark.parametrize("version", CUE_VERSIONS)
def test_phrases_resume_after_a_match(version: int) -> None:
    """"or should i choose" holds two overlapping phrases of the same domain; the scan takes the first and
    resumes after it, as the Python spelling does."""
    norm = "which is better or should i choose or should i"
    assert _scan(norm, version)[0] == _english_cues(norm, TABLES[version])


@pytest.mark.parametrize("change", [
    {"words_map": []}, {"prefix_heads": set()}, {"prefix_cues": (("pro",),)}, {"prefix_cues": ((1, "x"),)},
    {"phrases_by_first": {"which": [("reason", ("which", "is"))]}}, {"phrases_by_first": {"which": (("reason",),)}},
    {"number_words": {"two"}},
])
def test_the_cue_scan_refuses_malformed_tables(change: dict) -> None:
    t = TABLES[2]
    args = {"norm": "which is better", "words_map": t.words, "prefix_heads": t.prefix_heads,
            "shortest": t.prefix_length, "prefix_cues": t.prefix_cues, "phrases_by_first": t.phrases_by_first,
            "number_words": t.number_words}
    assert textfeatures.cue_scan(*args.values())[0] == {"reason"}
    args.update(change)
    with pytest.raises(TypeError):
        textfeatures.cue_scan(*args.values())


def test_the_implementation_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway logs which spelling runs (``edge/activation.py``): without the module, "python"."""
    assert features.implementation() == "C"
    monkeypatch.setattr(features, "_textfeatures", None)
    assert features.implementation() == "python"
