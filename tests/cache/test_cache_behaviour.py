"""The answer cache on a real diskcache directory: hits, misses, TTL, safety rules, FAQ, purge, LRU."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from edge.cache import AnswerCache
from edge.types import Message

from .conftest import SAMPLE_FAQ, ask, finish, recall, remember

Q = "When does the mall open?"
A = "The mall opens at 10:00 every day."
STATION = "How do I get to the station?"


def test_miss_then_store_then_hit(cache: AnswerCache) -> None:
    assert recall(cache, ask(Q)) is None
    assert remember(cache, ask(Q), A)
    hit = recall(cache, ask("when does the MALL open"))
    assert hit is not None
    assert (hit.text, hit.reason, hit.finish_reason, hit.model) == (A, "hit", "stop", "smollm2")
    assert hit.usage.completion_tokens == 7 and hit.age_s >= 0
    stats = cache.stats()
    assert (stats["entries"], stats["hits"], stats["misses"], stats["stores"]) == (1, 1, 1, 1)
    assert stats["hit_ratio"] == 0.5 and stats["bytes"] > 0


def test_survives_a_restart(make_cache) -> None:
    first = make_cache()
    assert remember(first, ask(Q), A)
    first.close()
    assert recall(make_cache(), ask(Q)).text == A


def test_values_are_json_on_disk_never_pickle(cache: AnswerCache, tmp_path: Path) -> None:
    remember(cache, ask(Q), A)
    with sqlite3.connect(tmp_path / "cache" / "answers" / "cache.db") as db:
        rows = db.execute("SELECT raw, mode, value FROM Cache").fetchall()
    assert rows and all(raw == 1 and mode == 1 for raw, mode, _ in rows)  # MODE_RAW bytes, str key
    (value,) = [json.loads(bytes(v)) for _, _, v in rows]
    assert value["text"] == A and value["q"] == "when does the mall open"


def test_ttl_expiry_and_max_age(make_cache) -> None:
    cache = make_cache(default_ttl_s=1.0)
    remember(cache, ask(Q), A)
    remember(cache, ask("Where is the ATM?", cache_control="max-age=300"), "Level 1.")
    assert recall(cache, ask(Q)) is not None
    time.sleep(1.2)
    assert recall(cache, ask(Q)) is None  # the default TTL ran out
    assert recall(cache, ask("Where is the ATM?")) is not None  # stored with max-age=300
    # ... but a kiosk asking for answers at most 1 s old does not get it.
    assert recall(cache, ask("Where is the ATM?", cache_control="max-age=1")) is None


def test_no_store_and_bypass_leave_the_cache_alone(cache: AnswerCache) -> None:
    for fields in ({"cache_control": "no-store"}, {"cache_header": "bypass"}):
        assert not remember(cache, ask(Q, **fields), A)
    assert cache.stats()["entries"] == 0
    remember(cache, ask(Q), A)
    assert recall(cache, ask(Q, cache_control="no-store")) is None
    assert recall(cache, ask(Q, cache_header="bypass")) is None


def test_no_cache_answers_fresh_but_overwrites_only_as_admin(cache: AnswerCache) -> None:
    remember(cache, ask(Q), "old answer")
    refresh = ask(Q, cache_control="no-cache")
    assert recall(cache, refresh) is None  # answered fresh ...
    assert not remember(cache, refresh, "a client's answer")  # ... but a client cannot overwrite
    assert recall(cache, ask(Q)).text == "old answer"
    admin = ask(Q, cache_control="no-cache", cache_admin=True)
    assert remember(cache, admin, "new answer")  # the admin token may refresh the shared answer
    assert recall(cache, ask(Q)).text == "new answer"


def test_knowledge_version_bump_invalidates(make_cache) -> None:
    v1 = make_cache(knowledge_version="2026-11")
    remember(v1, ask(Q), A)
    v2 = make_cache(knowledge_version="2026-12")
    assert recall(v2, ask(Q)) is None
    v2.set_knowledge_version("2026-11")
    assert recall(v2, ask(Q)).text == A
    assert v2.purge(knowledge_version="2026-11") == 1
    assert recall(v2, ask(Q)) is None


def test_model_swap_invalidates(cache: AnswerCache) -> None:
    remember(cache, ask(Q), A)
    cache.set_fingerprint("edge=smollm2-2;cloud=none")
    assert recall(cache, ask(Q)) is None


def test_multi_turn_is_never_read_nor_stored(cache: AnswerCache) -> None:
    remember(cache, ask("And on Sunday?"), "single-turn answer")
    follow_up = ask("And on Sunday?", history=[Message("user", Q), Message("assistant", A)])
    assert recall(cache, follow_up) is None
    assert not remember(cache, follow_up, "contextual answer")
    assert recall(cache, ask("And on Sunday?")).text == "single-turn answer"


@pytest.mark.parametrize(("kwargs", "fields"), [
    ({"finish": finish("length")}, {}),
    ({"finish": finish("content_filter")}, {}),
    ({"degraded": True}, {}),
    ({"hedge_loser": True}, {}),
    ({"route": "cache"}, {}),
    ({}, {"has_tools": True}),
    ({}, {"temperature": 0.9}),
])
def test_unsafe_answers_are_never_stored(cache: AnswerCache, kwargs, fields) -> None:
    assert not remember(cache, ask(Q, **fields), A, **kwargs)
    assert cache.stats()["entries"] == 0 and cache.stats()["skipped"] == 1


def test_high_temperature_when_the_operator_allows_it(make_cache) -> None:
    cache = make_cache(allow_high_temperature=True)
    assert remember(cache, ask(Q, temperature=0.9), A)
    assert recall(cache, ask(Q, temperature=0.9)).text == A
    assert recall(cache, ask(Q, temperature=0.2)) is None  # temperature is part of the key


def test_faq_pack_answers_every_phrasing_for_every_prompt(cache: AnswerCache) -> None:
    assert cache.load_faq(SAMPLE_FAQ) >= 12
    for question in ("When does the mall open?", "what time do you open", "商场几点开门", "你们几点开门？"):
        hit = recall(cache, ask(question, system="Another kiosk prompt.", temperature=0.9))
        assert hit is not None and hit.reason == "faq" and hit.model == "faq", question
    assert "10" in recall(cache, ask("When does the mall open?")).text
    assert "22:00" in recall(cache, ask("When does the mall close?")).text
    assert recall(cache, ask("商场几点关门？")).text.startswith("商场周日至周四")
    assert cache.stats()["faq_hits"] == 7


def test_faq_reload_replaces_the_pack_and_rejects_conflicts(cache: AnswerCache, tmp_path: Path) -> None:
    pack = tmp_path / "mall.json"
    pack.write_text(json.dumps([{"question": "Where is the ATM?", "answer": "Level 1."},
                                {"question": "Where is the cinema?", "answer": "Level 5."}]))
    assert cache.load_faq(pack) == 2
    pack.write_text(json.dumps([{"question": "Where is the ATM?", "answer": "Level 2 now."}]))
    assert cache.load_faq(pack) == 1
    assert recall(cache, ask("Where is the ATM?")).text == "Level 2 now."
    assert recall(cache, ask("Where is the cinema?")) is None  # dropped from the pack
    pack.write_text(json.dumps([{"question": "Where is the ATM?", "answer": "Level 1."},
                                {"question": "where is the ATM", "answer": "Level 3."}]))
    with pytest.raises(ValueError, match="two different answers"):
        cache.load_faq(pack)
    assert recall(cache, ask("Where is the ATM?")).text == "Level 2 now."  # a bad pack changes nothing


def test_purge_all_and_by_prefix(cache: AnswerCache) -> None:
    remember(cache, ask("Where is the ATM?"), "Level 1.")
    remember(cache, ask("Where is the cinema?"), "Level 5.")
    remember(cache, ask(STATION), A)
    cache.load_faq(SAMPLE_FAQ)
    assert cache.purge(prefix="Where is") == 2
    assert recall(cache, ask(STATION)).text == A
    key = cache.key_parts(ask(STATION)).key
    assert cache.purge(prefix=key[:12]) == 1
    remember(cache, ask(STATION), A)
    assert cache.purge() == 1
    assert cache.stats()["entries"] == 0
    assert cache.stats()["faq_entries"] > 0  # FAQ entries stay unless asked
    assert cache.purge(faq=True) > 0 and cache.stats()["faq_entries"] == 0


def test_lru_eviction_under_the_byte_limit(make_cache) -> None:
    cache = make_cache(size_limit_bytes=256 * 1024)
    text = "x" * 2000
    remember(cache, ask("question 0"), text)
    for i in range(1, 400):
        assert remember(cache, ask(f"question {i}"), text)
        assert recall(cache, ask("question 0")) is not None  # read often: stays
    stats = cache.stats()
    assert stats["entries"] < 400
    assert recall(cache, ask("question 1")) is None  # least recently used: evicted
    assert recall(cache, ask("question 399")) is not None


def test_disabled_cache(make_cache) -> None:
    cache = make_cache(enabled=False)
    assert not remember(cache, ask(Q), A)
    assert recall(cache, ask(Q)) is None
    assert cache.stats()["enabled"] is False
