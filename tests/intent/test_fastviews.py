"""The C hashing core (``models/intent/_fastviews.c``) against numpy's spelling of it, number for number.

``test_features_equivalence`` holds both spellings to the specification on the shipped texts; here random
text (any code point but lone surrogates, astral ones, runs that fill one sort bucket) checks the two against
each other, and the module's own guards are driven: a bad argument is a ValueError, never a crash, and a lone
surrogate makes it decline so that the numpy spelling raises its usual UnicodeEncodeError.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.intent import features
from models.intent.features import FeatureConfig, _hashed_views_c, _hashed_views_numpy, normalize

fastviews = features._fastviews
CONFIGS = [FeatureConfig(), FeatureConfig(char_ngrams=(3, 1, 2)), FeatureConfig(char_ngrams=(2, 2, 5))]
NO_SURROGATES = st.characters(exclude_categories=["Cs"])


def test_the_module_is_built() -> None:
    """``make venv`` compiles it (pyproject.toml's ext-modules); a kiosk without it runs numpy, slower."""
    assert fastviews is not None, "models/intent/_fastviews.c was not built: run `make venv` with a C compiler"


def _views_input(texts: list[str]) -> tuple[list[str], list[list[str]]]:
    norms = [normalize(text) for text in texts]
    return norms, [features._WORD_RE.findall(norm) for norm in norms]


def _assert_same(texts: list[str], config: FeatureConfig) -> None:
    norms, words = _views_input(texts)
    c = _hashed_views_c(norms, words, config)
    ref = _hashed_views_numpy(norms, words, config)
    assert c is not None
    assert c.hashes.dtype == ref.hashes.dtype == np.uint64
    assert np.array_equal(c.hashes, ref.hashes)
    assert np.array_equal(c.counts, ref.counts)
    assert (c.bounds, c.classes, c.numbers) == (ref.bounds, ref.classes, ref.numbers)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(NO_SURROGATES, max_size=120) | st.text("ab 中文1+{", max_size=200), min_size=1, max_size=3),
       st.sampled_from(CONFIGS))
def test_c_and_numpy_hash_the_same(texts: list[str], config: FeatureConfig) -> None:
    _assert_same(texts, config)


@pytest.mark.parametrize("text", ["x" * 600, "ab" * 300, "中" * 600, "𠀀😀" * 200, "", "a"])
def test_runs_that_fill_one_sort_bucket_and_tiny_views(text: str) -> None:
    """600 equal characters give one hash per order 600 times over: the sort's qsort fallback."""
    _assert_same([text, text[:40]], FeatureConfig())


def test_a_lone_surrogate_is_declined_and_numpy_raises_as_before() -> None:
    norms, words = _views_input(["where is \ud800 the gate"])
    assert _hashed_views_c(norms, words, FeatureConfig()) is None
    with pytest.raises(UnicodeEncodeError):
        features.featurize("where is \ud800 the gate", FeatureConfig())


def _call(**change: object) -> object:
    args = {"text": " ab ", "starts": [0, 4], "words": np.array([7], dtype=np.uint64), "word_counts": [1],
            "orders": (1, 2), "table": features._CLASS_TABLE, "hashes": np.empty(16, dtype=np.uint64),
            "counts": np.empty(16, dtype=np.int64)}
    args.update(change)
    return fastviews.views(*args.values())


@pytest.mark.parametrize("change", [
    {"starts": [0, 3]}, {"starts": [1, 4]}, {"starts": [0, 4, 2]}, {"word_counts": [2]},
    {"orders": (0,)}, {"orders": (-1,)}, {"table": np.zeros(10, dtype=np.uint8)},
    {"hashes": np.empty(2, dtype=np.uint64)}, {"counts": np.empty(2, dtype=np.int64)},
])
def test_bad_arguments_are_value_errors(change: dict) -> None:
    assert _call()[0] == [0, 7]  # the unchanged call works: " ab " has 3 + 3 distinct n-grams, and 1 word
    with pytest.raises((ValueError, TypeError)):
        _call(**change)


def test_read_only_output_is_refused() -> None:
    frozen = np.empty(16, dtype=np.uint64)
    frozen.setflags(write=False)
    with pytest.raises((ValueError, TypeError, BufferError)):
        _call(hashes=frozen)
