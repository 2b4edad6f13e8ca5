"""Who may read and write the cache: headers, multi-turn, tools, temperature."""

from __future__ import annotations

import pytest

from edge.cache.policy import decide_policy, parse_cache_control
from edge.config import CacheConfig
from edge.types import Message

from .conftest import ask

CONFIG = CacheConfig(default_ttl_s=600)


@pytest.mark.parametrize(("header", "no_store", "no_cache", "max_age"), [
    (None, False, False, None),
    ("no-store", True, False, None),
    ("No-Cache", False, True, None),
    ("max-age=30", False, False, 30.0),
    ('max-age="45", no-cache', False, True, 45.0),
    ("max-age=abc", False, False, None),
    ("max-age=-5", False, False, None),
    ("private, max-age=10, max-age=5", False, False, 5.0),
    ("max-age=1" + "0" * 400, False, False, None),  # would overflow float(): ignored, not a 500
    ("max-age=" + "9" * 5000, False, False, None),  # past int()'s digit limit
    ("max-age=1e9", False, False, None),
    ("max-age=315360000", False, False, 315360000.0),
])
def test_parse_cache_control(header, no_store, no_cache, max_age) -> None:
    cc = parse_cache_control(header)
    assert (cc.no_store, cc.no_cache, cc.max_age_s) == (no_store, no_cache, max_age)


@pytest.mark.parametrize(("fields", "read", "write", "reason"), [
    ({}, True, True, "ok"),
    ({"cache_control": "no-store"}, False, False, "no-store"),
    ({"cache_control": "no-cache"}, False, False, "no-cache"),  # refresh only where allowed
    ({"cache_header": "bypass"}, False, False, "bypass-header"),
    ({"cache_header": "refresh"}, False, False, "no-cache"),
    ({"cache_header": "refresh", "cache_admin": True}, False, True, "no-cache"),
    ({"cache_control": "no-cache", "cache_admin": True}, False, True, "no-cache"),
    ({"cache_control": "max-age=0"}, False, False, "max-age-0"),
    ({"has_tools": True}, False, False, "tools"),
    ({"has_images": True}, False, False, "unsupported-content"),
    ({"temperature": 0.9}, True, False, "high-temperature"),
])
def test_policy_table(fields, read, write, reason) -> None:
    policy = decide_policy(ask("When does the mall open?", **fields), CONFIG)
    assert (policy.read, policy.write, policy.reason) == (read, write, reason)


def test_multi_turn_never_reads_or_writes() -> None:
    req = ask("And on Sunday?", history=[Message("user", "When does the mall open?"),
                                         Message("assistant", "At 10:00.")])
    policy = decide_policy(req, CONFIG)
    assert (policy.read, policy.write, policy.reason) == (False, False, "multi-turn")


def test_max_age_sets_ttl_and_limits_reads() -> None:
    policy = decide_policy(ask("hi there", cache_control="max-age=30"), CONFIG)
    assert policy.ttl_s == 30 and policy.max_age_s == 30 and policy.read and policy.write
    assert decide_policy(ask("hi there"), CONFIG).ttl_s == 600


def test_max_age_never_exceeds_max_ttl() -> None:
    ten_years = decide_policy(ask("hi there", cache_control="max-age=315360000"), CONFIG)
    assert ten_years.ttl_s == CONFIG.max_ttl_s and ten_years.write
    capped = CacheConfig(default_ttl_s=600, max_ttl_s=60)
    assert decide_policy(ask("hi there"), capped).ttl_s == 60
    assert decide_policy(ask("hi there", cache_control="max-age=30"), capped).ttl_s == 30


def test_operator_may_allow_client_refresh() -> None:
    allowed = CacheConfig(allow_client_refresh=True)
    policy = decide_policy(ask("hi there", cache_control="no-cache"), allowed)
    assert not policy.read and policy.write


def test_huge_questions_skip_the_key_work() -> None:
    policy = decide_policy(ask("x" * (CONFIG.max_question_chars + 1)), CONFIG)
    assert (policy.read, policy.write, policy.reason) == (False, False, "too-long")
    policy = decide_policy(ask("hi there", system="s" * (CONFIG.max_system_prompt_chars + 1)), CONFIG)
    assert policy.reason == "too-long"
    assert decide_policy(ask("hi there", system="s" * 8000), CONFIG).write  # a long kiosk prompt is fine


def test_operator_may_allow_high_temperature() -> None:
    allowed = CacheConfig(allow_high_temperature=True)
    assert decide_policy(ask("hi there", temperature=1.2), allowed).write


def test_disabled_cache_does_nothing() -> None:
    policy = decide_policy(ask("hi there"), CacheConfig(enabled=False))
    assert not policy.read and not policy.write and policy.reason == "disabled"
