"""The one ``Redactor``: every credential shape that either of its two former copies masked.

The cloud bridge's copy masked ``Authorization`` values, bearer tokens, ``key=``/``api_key=``
values, ``api-key:``/``x-api-key:`` headers and ``sk-`` keys of 6+ characters; the request-log
copy masked bearer tokens, ``sk-`` keys, ``api_key=`` and ``token=`` values and had ``clean`` for
nested data. Both cases are pinned here, so neither set can be dropped by accident.
"""

from __future__ import annotations

import logging

import pytest

from cloud_bridge.redact import MASK, RedactingFilter, Redactor, safe_url
from edge.observability import logs as request_logs
from edge.observability.core import Redactor as ObservabilityRedactor

FORMER_CLOUD_SHAPES = [
    ("Authorization: Bearer zzz-secret-token", "Authorization: [redacted]", "zzz-secret-token"),
    ("authorization=abc123xyz", "authorization=[redacted]", "abc123xyz"),
    ("sent bearer q1w2e3", "sent bearer [redacted]", "q1w2e3"),
    ("url?key=AIzaXYZ&x=1", "url?key=[redacted]&x=1", "AIzaXYZ"),
    ("x-api-key: 0123abcd, next", "x-api-key: [redacted], next", "0123abcd"),
    ("api-key=0123abcd", "api-key=[redacted]", "0123abcd"),
    ("Incorrect API key provided: sk-abc123", "Incorrect API key provided: [redacted]", "sk-abc123"),
]
FORMER_LOG_SHAPES = [
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.x", "Authorization: [redacted]", "eyJhbGciOiJIUzI1NiJ9"),
    ("Bearer abcdefghijklmnop", "Bearer [redacted]", "abcdefghijklmnop"),
    ("use sk-proj-abcdefgh1234", "use [redacted]", "sk-proj-abcdefgh1234"),
    ("GET /v1?api_key=abcdef123456&x=1", "GET /v1?api_key=[redacted]&x=1", "abcdef123456"),
    ("GET /v1?API_KEY=abcdef123456", "GET /v1?API_KEY=[redacted]", "abcdef123456"),
    ("callback?token=t0k3n-value&y=2", "callback?token=[redacted]&y=2", "t0k3n-value"),
]


@pytest.mark.parametrize(("text", "expected", "secret"), FORMER_CLOUD_SHAPES + FORMER_LOG_SHAPES)
def test_every_former_shape_is_masked(text: str, expected: str, secret: str) -> None:
    cleaned = Redactor()(text)
    assert cleaned == expected
    assert secret not in cleaned


def test_configured_secrets_are_masked_verbatim_longest_first() -> None:
    redact = Redactor(["s3cr3t-value", "s3cr3t", None, "abc"])  # "abc": too short to mask
    assert redact("x s3cr3t-value y s3cr3t abc") == "x [redacted] y [redacted] abc"
    redact.add("plainword-secret")
    assert redact("a plainword-secret b") == "a [redacted] b"


def test_ordinary_text_is_left_alone() -> None:
    redact = Redactor(["s3cr3t-value"])
    for text in ("nothing to see", "max_tokens=5 and tokens: 12", "route: edge, ttft 12 ms", ""):
        assert redact(text) == text


def test_clean_walks_nested_data() -> None:
    redact = Redactor(["s3cr3t-value"])
    data = {"a": ["sk-0123456789ab", {"b": "is s3cr3t-value"}], 1: ("x", 2), "n": None}
    assert redact.clean(data) == {"a": ["[redacted]", {"b": "is [redacted]"}], "1": ["x", 2], "n": None}


def test_one_class_serves_bridge_logs_and_observability() -> None:
    assert request_logs.Redactor is Redactor and ObservabilityRedactor is Redactor
    assert MASK == "[redacted]"


def test_log_filter_rewrites_third_party_records() -> None:
    record = logging.LogRecord("httpx", logging.INFO, __file__, 1, "GET %s", ("https://h/v1?key=AIzaXYZ",), None)
    assert RedactingFilter(Redactor()).filter(record)
    assert record.getMessage() == "GET https://h/v1?key=[redacted]"


def test_safe_url_keeps_urls_readable() -> None:
    assert safe_url("https://user:pw@api.example.com/v1?key=SECRET&a=b") == "https://api.example.com/v1?key=***&a=b"
