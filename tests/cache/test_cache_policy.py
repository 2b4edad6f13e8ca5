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
])
def test_parse_cache_control(header, no_store, no_cache, max_age) -> None:
    cc = parse_cache_control(header)
    assert (cc.no_store, cc.no_cache, cc.max_age_s) == (no_store, no_cache, max_age)


@pytest.mark.parametrize(("fields", "read", "write", "reason"), [
    ({}, True, True, "ok"),
    ({"cache_control": "no-store"}, False, False, "no-store"),
    ({"cache_control": "no-cache"}, False, True, "no-cache"),
    ({"cache_header": "bypass"}, False, False, "bypass-header"),
    ({"cache_header": "refresh"}, False, True, "no-cache"),
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


def test_operator_may_allow_high_temperature() -> None:
    allowed = CacheConfig(allow_high_temperature=True)
    assert decide_policy(ask("hi there", temperature=1.2), allowed).write


def test_disabled_cache_does_nothing() -> None:
    policy = decide_policy(ask("hi there"), CacheConfig(enabled=False))
    assert not policy.read and not policy.write and policy.reason == "disabled"
