"""The one-pass feature code returns exactly what the specification returns.

``reference_features`` (with ``reference_cues``) is the feature computation the shipped model was trained
on, written one view and one n-gram order at a time (the parts the rewrite left alone it imports; a digest
of the shipped features guards those). ``models.intent.features.featurize`` computes the
same features in fewer numpy calls; any difference (an index, a value's last bit, the order) would
move the shipped model's probabilities, so the comparison is exact: on the texts shipped in the
repository (a third of them per run) and on edge cases, for the shipped configuration, the version-2
layout and an odd one, with the text features in C and in numpy (``tests/intent/test_textfeatures.py`` compares
those two on random text too).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.intent import ask, cues, features
from models.intent.cues import CUE_VERSIONS, TABLES, CueTables, _count_numbers, _Cue, _first_chars, cue_tokens
from models.intent.features import FeatureConfig, featurize, normalize
from tests.intent import reference_cues, reference_features

ROOT = Path(__file__).resolve().parents[2]
EDGE_CASES = [
    "", " ", "a", "\n", "??", "hello\n", "  spaced  out  ", "你", "𝒳 astral 😀 characters", "x" * 700,
    "ab\n" * 300, "Thanks! Where is gate B12? Thank you so much.", "请问洗手间在哪里？谢谢", "a.b.c... ok",
    "um so like where's the uh taxi stand", "1,000 yen is how many dollars", "def f(x): return x ** 2",
]


def _shipped_texts() -> list[str]:
    texts: list[str] = []
    paths = sorted((ROOT / "models" / "intent" / "data").rglob("*.jsonl"))
    paths += sorted((ROOT / "bench" / "data" / "routing").glob("*.jsonl"))
    for path in paths:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                row = json.loads(line)
                if "text" in row:
                    texts.append(row["text"])
                texts += [m["content"] for m in row.get("messages") or () if isinstance(m.get("content"), str)]
    return texts + EDGE_CASES


TEXTS = _shipped_texts()
# The features of the held-out file and EDGE_CASES per feature version. Version 3: as the code before the
# rewrite (commit f15c641) computed them, which version 3 models were trained on. Version 4 (cue vocabulary 2):
# as first computed with that vocabulary. Version 5 (cue vocabulary 3): likewise (round v25).
FEATURES_DIGESTS = {
    3: "a14c01021eb946df47637f8833be14dc54d1546a5f20301d9049ed66f435ad16",
    4: "fe8f1190306907c32300c48d81bb459e725921ad397c7d783ed09caea4e547ae",
    5: "270562e7cfbcd54d5b04216690242fb67dd8ff6cde22f68f8c60acac66c647e2",
}
CONFIGS = {
    "shipped": FeatureConfig(),
    "version-3": FeatureConfig(version=3),
    "version-2": FeatureConfig(version=2),
    "odd": FeatureConfig(dim=1000, char_ngrams=(3, 1, 2), norm_power=0.7, whole_weight=0.4, ask_weight=1.5,
                         cue_weight=0.8),
}


def test_the_texts_are_many() -> None:
    assert len(TEXTS) > 4000


@pytest.fixture(params=["c", "numpy"])
def spelling(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both spellings of the text features and the English cues: the C module (which ``make`` builds) and
    the Python and numpy one, which runs where the module was not built."""
    if request.param == "numpy":
        monkeypatch.setattr(features, "_textfeatures", None)
        monkeypatch.setattr(cues, "_textfeatures", None)
    else:
        assert features._textfeatures is not None, "models/intent/_textfeatures.c was not built: run `make venv`"
    return request.param


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_featurize_matches_the_specification(name: str, spelling: str) -> None:
    config = CONFIGS[name]
    # Every third shipped text (every text was checked when this code was written), every edge case.
    texts = (TEXTS[::3] if name == "shipped" else TEXTS[::15]) + EDGE_CASES
    for text in texts:
        idx, val = featurize(text, config)
        ref_idx, ref_val = reference_features.featurize(text, config)
        assert idx.dtype == ref_idx.dtype and val.dtype == ref_val.dtype
        assert np.array_equal(idx, ref_idx), text[:80]
        assert np.array_equal(val, ref_val), text[:80]


def test_a_message_that_nfkc_expands_past_the_count_table_matches_the_specification(spelling: str) -> None:
    """Each "ﷺ" is 18 characters after NFKC: 600 of them count more n-grams than the table of 1 + log(k)
    holds, so the features take the computed fallback, which must agree with the specification too."""
    text = "ﷺ" * 600
    idx, val = featurize(text, FeatureConfig())
    ref_idx, ref_val = reference_features.featurize(text, FeatureConfig())
    assert np.array_equal(idx, ref_idx) and np.array_equal(val, ref_val)


@pytest.mark.parametrize("version", CUE_VERSIONS)
def test_cues_match_the_specification(version: int, spelling: str) -> None:
    for text in TEXTS[1::4]:
        norm = normalize(text)
        assert cue_tokens(norm, version) == reference_cues.cue_tokens(norm, version), text[:80]


def _features_digest(version: int) -> str:
    """sha256 of the shipped configuration's features of the held-out file and the edge cases (values
    rounded to 5 decimals: another CPU's BLAS may differ in a float's last bit)."""
    path = ROOT / "models" / "intent" / "data" / "heldout" / "kiosk_heldout_test.jsonl"
    with path.open(encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh if line.strip() and "text" in json.loads(line)]
    digest = hashlib.sha256()
    for text in texts + EDGE_CASES:
        idx, val = featurize(text, FeatureConfig(version=version))
        digest.update(idx.astype("<i8").tobytes())
        digest.update(np.round(val.astype(np.float64), 5).astype("<f8").tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize("version", sorted(FEATURES_DIGESTS))
def test_the_features_of_each_version_have_not_moved(version: int) -> None:
    """What the specification imports from the module (configuration, normalisation, hash constants,
    final ask, cue tables) is checked here: a model reads the features it was trained on, whichever version
    its card names. A change that moves them needs a new version (or a retrained model)."""
    assert _features_digest(version) == FEATURES_DIGESTS[version]


def test_the_feature_version_names_the_cue_vocabulary_and_a_contradiction_is_refused() -> None:
    card = FeatureConfig().to_dict()
    assert card["version"] == 5 and card["cue_version"] == max(CUE_VERSIONS) == 3
    del card["cue_version"]
    assert FeatureConfig.from_dict(card).cue_version == 3
    assert FeatureConfig.from_dict({**card, "version": 4}).cue_version == 2
    assert FeatureConfig.from_dict({**card, "version": 3}).cue_version == 1
    with pytest.raises(ValueError, match="cue vocabulary 2 with feature version 5"):
        FeatureConfig.from_dict({**card, "cue_version": 2})
    with pytest.raises(ValueError, match="feature version 6"):
        FeatureConfig.from_dict({**card, "version": 6})


@pytest.mark.parametrize("version", CUE_VERSIONS)
def test_the_chinese_prefilter_keeps_every_match(version: int) -> None:
    """The first-character lookahead of the Chinese terms admits every position a term matches at: the
    same matches, spans and domains as the plain alternation, on every shipped text."""
    plain = reference_cues._zh_re(version)
    fast = TABLES[version].zh_re
    assert fast.pattern != plain.pattern
    for text in TEXTS:
        norm = normalize(text)
        assert [(m.span(), m.lastgroup) for m in fast.finditer(norm)] == \
               [(m.span(), m.lastgroup) for m in plain.finditer(norm)], text[:80]


@given(st.text(alphabet="ab 1?!,.。，\t\n\u3000\u00a0\x1c\u2028ＡＢ中", max_size=30) | st.text(max_size=30))
def test_normalize_matches_the_specification(text: str) -> None:
    assert normalize(text) == reference_features.normalize(text)


# Digits, separators, Chinese numerals and units, number words and their neighbours (letters, digits, CJK,
# underscore, an accented letter): every way a numeral and a number word could touch.
_NUMBER_PIECES = ["two", "eighteen", "eight", "sixty", "six", "hundred", "one", "3", "12.5", "1,000", ",", ".",
                  " ", "二", "十五", "个", "块", "楼", "x", "_", "é", "s", "-", "٣"]


@given(st.lists(st.sampled_from(_NUMBER_PIECES), max_size=12).map("".join), st.sampled_from(CUE_VERSIONS))
def test_numbers_are_counted_as_the_number_pattern_counts(text: str, version: int) -> None:
    """``number:<n>`` counts the distinct matches of the version's number pattern; the two-part count
    finds the same number, however numerals and number words sit next to each other."""
    t = TABLES[version]
    assert _count_numbers(text, t) == len(set(t.number_re.findall(text)))


def test_the_ask_patterns_first_character_lookahead_keeps_every_match() -> None:
    """The ask patterns with their first-character lookahead find an ask in every sentence and clause of
    the shipped texts that the plain tries find one in, and in no other (``final_ask`` needs only that)."""
    plain_en = re.compile(r"\b" + ask._trie_pattern(ask._ASK_EN_TERMS) + r"\b", re.IGNORECASE)
    plain_zh = re.compile(f"{ask._trie_pattern(ask._ASK_ZH_TERMS)}|{ask._ASK_ZH_MEASURE}")
    assert ask._ASK_EN.pattern != plain_en.pattern and ask._ASK_ZH.pattern != plain_zh.pattern
    for text in [*TEXTS, "WHERE is it", "ſhow me", "几楼", "Is The"]:
        for piece in [text, *ask._SENTENCE_RE.findall(text), *ask._CLAUSE_RE.findall(text)]:
            assert (ask._ASK_EN.search(piece) is None) == (plain_en.search(piece) is None), piece[:80]
            assert (ask._ASK_ZH.search(piece) is None) == (plain_zh.search(piece) is None), piece[:80]


def test_a_chinese_term_pattern_must_start_plainly() -> None:
    """A branch the prefilter cannot read the first character of is refused when the tables are built."""
    assert _first_chars(_Cue(frozenset(), zh=("药店",), zh_re=(r"(?<!小)程序", r"(?<![免退])税"))) == {"药", "程", "税"}
    with pytest.raises(ValueError, match="plain character"):
        _first_chars(_Cue(frozenset(), zh_re=(r"[甲乙]方",)))
    with pytest.raises(ValueError, match="plain character"):
        _first_chars(_Cue(frozenset(), zh_re=(r"(?:合同)",)))


def test_a_one_word_cue_phrase_is_refused() -> None:
    """Phrase positions are found by their first two words, so a phrase of one word could never be found."""
    with pytest.raises(ValueError, match="two words"):
        CueTables(("code",), {}, (), {"regex": (("code", ("regex",)),)}, re.compile("x"), re.compile("1"),
                  frozenset())
