"""The FAQ-pack parser (``models.faq``): JSON and CSV, and a clear error for every bad pack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.faq import FaqEntry, load_faq_pack, parse_faq_pack

from .conftest import SAMPLE_FAQ


def test_sample_pack_has_english_and_chinese_with_paraphrases() -> None:
    entries = load_faq_pack(SAMPLE_FAQ)
    assert len(entries) >= 12
    assert {e.lang for e in entries} == {"en", "zh"}
    assert all(isinstance(e, FaqEntry) and e.answer for e in entries)
    assert sum(len(e.paraphrases) for e in entries) > len(entries)


def test_json_pack_and_bare_list(tmp_path: Path) -> None:
    entry = {"question": "Where is the ATM?", "answer": "Next to the lifts.", "paraphrases": ["ATM?"]}
    full = tmp_path / "full.json"
    full.write_text(json.dumps({"format": "edgecloud-faq", "version": 1, "entries": [entry]}))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps([entry]))
    for path in (full, bare):
        (got,) = load_faq_pack(path)
        assert got == FaqEntry("Where is the ATM?", "Next to the lifts.", ["ATM?"], None, None)


def test_csv_pack_with_bom_quotes_and_paraphrases(tmp_path: Path) -> None:
    path = tmp_path / "mall.csv"
    path.write_bytes(
        "\ufeffid,lang,question,answer,paraphrases\n"
        'atm,en,Where is the ATM?,"Level 1, next to the lifts.",ATM?|cash machine\n'
        "\n"
        "hours,zh,商场几点开门？,上午10点。,\n".encode()
    )
    atm, hours = load_faq_pack(path)
    assert atm == FaqEntry("Where is the ATM?", "Level 1, next to the lifts.", ["ATM?", "cash machine"], "atm", "en")
    assert hours.question == "商场几点开门？" and hours.paraphrases == [] and hours.lang == "zh"


@pytest.mark.parametrize(("kind", "content", "message"), [
    ("json", "{not json", "invalid JSON"),
    ("json", '{"format": "other", "entries": []}', "is not 'edgecloud-faq'"),
    ("json", '{"version": 2, "entries": [{"question": "q", "answer": "a"}]}', "version 2"),
    ("json", '{"entries": []}', "no entries"),
    ("json", '{"entries": {"q": "a"}}', "'entries' must be a list"),
    ("json", '[{"question": "q"}]', "entry 1: 'answer' must be a non-empty string"),
    ("json", '[{"question": "  ", "answer": "a"}]', "'question' must be a non-empty string"),
    ("json", '[{"question": "q", "answer": "a", "paraphrases": "p"}]', "'paraphrases' must be a list"),
    ("json", '[{"question": "q", "answer": "a", "colour": "red"}]', "unknown fields ['colour']"),
    ("json", '[{"id": "x", "question": "q", "answer": "a"}, {"id": "x", "question": "r", "answer": "b"}]',
     "the id 'x' is used twice"),
    ("csv", "question,reply\nq,a\n", "must name 'question' and 'answer'"),
    ("csv", "question,answer\nq,a,extra\n", "more cells than the header"),
    ("csv", "question,answer,colour\nq,a,red\n", "unknown CSV columns"),
    ("csv", "question,answer\nq,\n", "'answer' must be a non-empty string"),
])
def test_bad_packs_are_rejected_with_a_clear_message(kind: str, content: str, message: str) -> None:
    with pytest.raises(ValueError, match="FAQ pack") as info:
        parse_faq_pack(content.encode(), kind, source="pack")
    assert message in str(info.value)


def test_not_utf8_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not UTF-8"):
        parse_faq_pack("question,answer\nq,é\n".encode("latin-1"), "csv")
    with pytest.raises(ValueError, match="cannot be read"):
        load_faq_pack(tmp_path / "missing.json")


def test_faq_module_imports_nothing_from_edge() -> None:
    source = (Path(__file__).resolve().parents[2] / "models" / "faq.py").read_text()
    assert "from edge" not in source and "import edge" not in source
