"""One JSON line per request: the fields an operator needs, no prompt by default, never a key."""

from __future__ import annotations

import json
import logging

import pytest

from edge.logs import JsonFormatter
from edge.observability import Observability
from edge.observability.logs import REQUEST_LOGGER

from .helpers import API_KEY, T0, make_settings, record
from .traffic import PROMPT, feed


def _lines(caplog: pytest.LogCaptureFixture) -> list[dict]:
    """The request records as the gateway's JSON formatter writes them: one JSON object per line."""
    fmt = JsonFormatter()
    out = []
    for r in caplog.records:
        if r.name == REQUEST_LOGGER:
            line = fmt.format(r)
            assert "\n" not in line
            out.append(json.loads(line))
    return out


def _text(caplog: pytest.LogCaptureFixture) -> str:
    fmt = JsonFormatter()
    return "\n".join(fmt.format(r) for r in caplog.records)


def test_one_line_per_request_without_prompt_or_key(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    obs = Observability(make_settings(tmp_path))
    with caplog.at_level(logging.INFO, logger=REQUEST_LOGGER):
        feed(obs)
    lines = _lines(caplog)
    assert len(lines) == 11  # 4 edge + 2 cache + 3 cloud + 1 cloud error + 1 rejected
    first = lines[0]
    assert first["request_id"] == "edge-0" and first["route"] == "edge"
    assert first["reason"] == "classifier:simple:0.93" and first["outcome"] == "ok"
    assert first["ttft_ms"] == 200.0 and first["total_ms"] == 1000.0 and first["queue_ms"] == 50.0
    assert (first["prompt_tokens"], first["completion_tokens"]) == (100, 50)
    rejected = lines[-1]
    assert rejected["outcome"] == "rejected" and rejected["status"] == 400 and "route" not in rejected
    assert first["logger"] == REQUEST_LOGGER and first["msg"].startswith("request edge-0 edge ok")
    text = _text(caplog)
    assert PROMPT not in text and "Alice" not in text and "prompt\":" not in text
    assert API_KEY not in text


def test_prompt_only_when_the_operator_turns_it_on(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    settings = make_settings(tmp_path)
    settings.logging.log_prompts = True
    obs = Observability(settings)
    with caplog.at_level(logging.INFO, logger=REQUEST_LOGGER):
        obs.observe_request(record("p1", T0, "edge", prompt=f"hello, my key is {API_KEY}", ttft_ms=1.0))
    (line,) = _lines(caplog)
    assert line["prompt"] == "hello, my key is [redacted]"  # prompts logged, keys still never


def test_keys_are_redacted_wherever_they_appear(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    obs = Observability(make_settings(tmp_path))
    with caplog.at_level(logging.INFO, logger=REQUEST_LOGGER):
        obs.observe_request(record(
            "k1", T0, "cloud", provider="acme", outcome="error", status=401,
            error_code=f"upstream said: invalid key {API_KEY}", model="Bearer abcdefghijklmnop",
        ))
    text = _text(caplog)
    assert API_KEY not in text and "abcdefghijklmnop" not in text
    assert text.count("[redacted]") == 2
