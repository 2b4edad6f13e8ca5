"""The knowledge-pack format: Markdown and JSON, versions, and refusals that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.knowledge_pack import MAX_FACT_CHARS, load_knowledge_pack, parse_knowledge_pack

EXAMPLE = Path(__file__).resolve().parents[2] / "edge" / "knowledge" / "packs" / "harbourview-mall.md"

GOOD_MD = """---
name: test-mall
version: 3
refusal.en: Please ask at the Information Desk.
---
Commentary before the first fact is ignored.

## toilets (en)
keywords: restroom, WC
faq: Where are the toilets?
Toilets are on Level 7 next to the red lift.

## toilets (zh)
洗手间在7楼红色电梯旁边。
"""


def test_markdown_pack_parses() -> None:
    pack = parse_knowledge_pack(GOOD_MD, "markdown", source="mall.md")
    assert (pack.name, pack.pack_version) == ("test-mall", "3")
    assert [(f.id, f.lang, f.line) for f in pack.facts] == [("toilets", "en", 8), ("toilets", "zh", 13)]
    assert pack.facts[0].keywords == ("restroom", "WC")
    assert pack.refusal == {"en": "Please ask at the Information Desk."}
    faq = pack.faq_entries()
    assert [(e.question, e.answer) for e in faq] == [("Where are the toilets?", pack.facts[0].text)]
    assert pack.version.startswith("test-mall@3#")


def test_json_pack_with_faq_entries() -> None:
    doc = {"format": "edgecloud-knowledge", "version": 1, "name": "terminal-2", "pack_version": "2026.1",
           "refusal": {"zh": "请咨询服务台。"},
           "facts": [{"id": "gate-b", "lang": "en", "text": "Gates B1-B20 are upstairs.", "keywords": ["gates"]}],
           "faq": [{"question": "Is there wifi?", "answer": "Yes: T2-Free."}]}
    pack = parse_knowledge_pack(json.dumps(doc), "json", source="t2.json")
    assert len(pack.facts) == 1 and [e.question for e in pack.faq_entries()] == ["Is there wifi?"]


def test_content_change_changes_the_version_even_without_a_version_bump() -> None:
    one = parse_knowledge_pack(GOOD_MD, "markdown")
    two = parse_knowledge_pack(GOOD_MD.replace("Level 7", "Level 8"), "markdown")
    assert one.pack_version == two.pack_version and one.version != two.version


def test_example_pack_is_bilingual_and_about_150_facts() -> None:
    pack = load_knowledge_pack(EXAMPLE)
    assert pack.languages == ["en", "zh"]
    assert 140 <= len({f.id for f in pack.facts}) <= 160


@pytest.mark.parametrize(("text", "message"), [
    (GOOD_MD.replace("Toilets are on Level 7 next to the red lift.", ""), "mall.md: line 8: the fact has no text"),
    (GOOD_MD.replace("## toilets (zh)", "## toilets (en)"), "line 13: the fact 'toilets/en' is defined twice"),
    (GOOD_MD.replace("## toilets (zh)", "## toilets"), "line 13: the language ''"),
    (GOOD_MD.replace("Toilets are", "T" * (MAX_FACT_CHARS + 1)),
     f"line 8: the fact is {MAX_FACT_CHARS + 34} characters, more than {MAX_FACT_CHARS}"),
    (GOOD_MD.replace("name: test-mall\n", ""), "mall.md: no 'name' or 'version'"),
    (GOOD_MD.replace("---\nCommentary", "Commentary"), "line 5: expected 'key: value' in the header"),
    ("---\nname: a\nversion: 1\n", "line 1: the '---' header is not closed"),
    (GOOD_MD.replace("## toilets (zh)", "## bad id! (zh)"), "line 13: a fact heading is '## id (lang)'"),
])
def test_bad_markdown_is_refused_with_file_and_line(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_knowledge_pack(text, "markdown", source="mall.md")
    assert message in str(info.value)
    assert "mall.md" in str(info.value)


def test_bad_encoding_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "venue.md"
    path.write_bytes(GOOD_MD.encode("utf-8").replace("洗手间".encode(), "洗手间".encode("gb18030")))
    with pytest.raises(ValueError, match=r"venue.md: line 14: not UTF-8"):
        load_knowledge_pack(path)


def test_bad_json_names_the_line() -> None:
    with pytest.raises(ValueError, match=r"x.json: line 3: invalid JSON"):
        parse_knowledge_pack('{"name": "a",\n "facts": [\n  oops]}', "json", source="x.json")
    doc = '{"name": "a", "pack_version": "1",\n "facts": [\n {"id": "e", "lang": "en", "text": "  "}]}'
    with pytest.raises(ValueError, match=r"x.json: line 3: fact 1: the fact has no text"):
        parse_knowledge_pack(doc, "json", source="x.json")


def test_fleet_smoke_check_reads_a_knowledge_pack() -> None:
    from models.fleet.smoke import CHECKS

    assert "294 facts (en, zh)" in CHECKS["knowledge"](EXAMPLE)
