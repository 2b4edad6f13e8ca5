"""Key normalisation folds spelling, never meaning; the key covers everything that changes an answer."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge.cache.keys import _CJK_CLASS, _PUNCTUATION, key_parts, normalize_text

from .conftest import ask

SAME = [
    ("When does the mall open?", "when does the mall open"),
    ("When  does\tthe MALL open ?!", "when does the mall open"),
    ("ＷＨＥＮ　ＤＯＥＳ　ＴＨＥ　ＭＡＬＬ　ＯＰＥＮ？", "when does the mall open"),  # full-width forms
    ("商场 几点 开门？", "商场几点开门"),
    ("商场几点开门?", "商场几点开门"),
    ("「商场」几点开门！", "商场几点开门"),
    ("WiFi 密码", "wifi密码"),
    ("Wi-Fi password", "wifi password"),
    ("Don't park here", "dont park here"),
    ("３楼", "3楼"),
    ("1,000 yuan", "1000 yuan"),
    ("Straße", "strasse"),  # case folding, not just lower()
]
DIFFERENT = [
    ("When does the mall open?", "When does the mall close?"),
    ("Is parking free?", "Is parking not free?"),
    ("Gate 3", "Gate 5"),
    ("1.5 hours", "15 hours"),
    ("3-5 pm", "35 pm"),
    ("商场几点开门", "商场几点关门"),
    ("停车免费吗", "停车不免费吗"),
    ("三楼", "五楼"),
    ("can I park", "can't I park"),
]


@pytest.mark.parametrize(("text", "expected"), SAME)
def test_normalisation_folds_spelling(text: str, expected: str) -> None:
    assert normalize_text(text) == expected


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_normalisation_keeps_words_digits_and_negations(a: str, b: str) -> None:
    assert normalize_text(a) != normalize_text(b)


@given(st.text(max_size=60))
def test_normalisation_is_idempotent(text: str) -> None:
    once = normalize_text(text)
    assert normalize_text(once) == once


def _normalize_as_specified(text: str) -> str:
    """``normalize_text`` in its first spelling, each rule a plain regular expression (lookbehind first):
    the fast patterns of ``edge.cache.keys`` must change no key that a stored answer was written under."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"(?<=[^\W\d_])['’‘`\-‐‑](?=[^\W\d_])", "", text)
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)
    words = re.sub(r"\s+", " ", text.translate(_PUNCTUATION)).strip()
    return re.sub(f"(?<=[{_CJK_CLASS}]) | (?=[{_CJK_CLASS}])", "", words)


# Every character the rules look at, and their neighbours: joiners, digits, commas, CJK, Latin, underscore,
# full-width and odd spaces, punctuation.
_RULE_CHARS = "ab1_'’‘`-‐‑,, 3商场ａ０\u3000\u00a0\t\n\x1c.?!「」é"


@given(st.text(alphabet=_RULE_CHARS, max_size=40) | st.text(max_size=40))
def test_normalisation_matches_its_specification(text: str) -> None:
    assert normalize_text(text) == _normalize_as_specified(text)


@pytest.mark.parametrize("text", [*(a for a, _ in SAME), *(t for pair in DIFFERENT for t in pair),
                                  "wi - fi 3-5 x-y 1,0000 12,345,678 a,123 中 a 中 ，中 」b a’b `c` _-_ é-à"])
def test_normalisation_matches_its_specification_on_examples(text: str) -> None:
    assert normalize_text(text) == _normalize_as_specified(text)


def _key(**fields: object) -> str:
    fp = str(fields.pop("fingerprint", "edge=a"))
    kv = str(fields.pop("knowledge", "1"))
    question = str(fields.pop("question", "When does the mall open?"))
    return key_parts(ask(question, **fields), fp, kv).key  # type: ignore[arg-type]


def test_key_ignores_spelling_and_transport() -> None:
    base = _key()
    assert _key(question="when does the MALL open") == base
    assert _key(stream=True) == base
    assert _key(user="kiosk-7") == base


@pytest.mark.parametrize("change", [
    {"question": "When does the mall close?"},
    {"system": "You are a cinema kiosk."},
    {"fingerprint": "edge=b"},
    {"knowledge": "2"},
    {"temperature": 0.2},
    {"top_p": 0.5},
    {"max_tokens": 32},
    {"stop": ["\n"]},
    {"seed": 7},
    {"route_name": "edgecloud-cloud"},
    {"route_header": "cloud"},
])
def test_key_covers_everything_that_changes_the_answer(change: dict[str, object]) -> None:
    assert _key(**change) != _key()
