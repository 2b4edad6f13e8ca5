"""Unit tests of the pure parts: SSE parsing, Retry-After, retry budget, breaker, redaction, config."""

from __future__ import annotations

import email.utils
import random
from pathlib import Path

import pytest

from cloud_bridge.breaker import CircuitBreaker
from cloud_bridge.config import CloudConfig
from cloud_bridge.redact import Redactor, safe_url
from cloud_bridge.retry import RetryBudget, full_jitter_backoff, parse_retry_after
from cloud_bridge.sse import SSEParser
from cloud_bridge.timings import CallTimings


def feed_all(parser: SSEParser, pieces: list[bytes]) -> list[str]:
    out = []
    for piece in pieces:
        out.extend(e.data for e in parser.feed(piece))
    return out


def test_sse_multiline_data_comments_and_done() -> None:
    stream = b": keep-alive\n\ndata: {\"a\":\ndata: 1}\n\nevent: ping\n\ndata: [DONE]\n\n"
    assert feed_all(SSEParser(), [stream]) == ['{"a":\n1}', "[DONE]"]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_sse_events_split_at_every_byte(newline: bytes) -> None:
    stream = (b"data: first" + newline + newline + b"id: 7" + newline + b"data:second" + newline + newline
              + b":c" + newline + b"data:  third" + newline + newline)
    pieces = [stream[i : i + 1] for i in range(len(stream))]
    assert feed_all(SSEParser(), pieces) == ["first", "second", " third"]


def test_sse_event_field_and_pending() -> None:
    parser = SSEParser()
    events = parser.feed(b"event: error\ndata: {\"error\": 1}\n\ndata: partial")
    assert [(e.event, e.data) for e in events] == [("error", '{"error": 1}')]
    assert parser.pending_bytes > 0


def test_retry_after_forms() -> None:
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    date = email.utils.formatdate(1_000_030, usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=1_000_000) == pytest.approx(30.0)
    assert parse_retry_after({"retry-after": "garbage"}) is None
    assert parse_retry_after({}) is None


def test_full_jitter_is_bounded() -> None:
    rng = random.Random(1)
    values = [full_jitter_backoff(3, 0.1, 0.5, rng) for _ in range(200)]
    assert all(0 <= v <= 0.5 for v in values)
    assert max(values) > 0.4  # uses the whole range, i.e. really jittered


def test_retry_budget_caps_retries_at_ratio() -> None:
    budget = RetryBudget(ratio=0.2, capacity=10, initial=0)
    retries = 0
    for _ in range(100):
        budget.on_request()
        while budget.try_retry():
            retries += 1
    assert retries == 20


def test_breaker_consecutive_half_open_and_close() -> None:
    now = [0.0]
    breaker = CircuitBreaker(consecutive=3, open_s=10, clock=lambda: now[0])
    for _ in range(3):
        assert breaker.allow()
        breaker.record_failure()
    assert breaker.state == "open" and not breaker.allow()
    now[0] = 11
    assert breaker.state == "half_open"
    assert breaker.allow()  # the single probe
    assert not breaker.allow()  # no second probe while the first is in flight
    breaker.record_failure()
    assert breaker.state == "open"
    now[0] = 22
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state == "closed" and breaker.allow()


def test_breaker_error_rate_window() -> None:
    now = [0.0]
    breaker = CircuitBreaker(consecutive=100, error_rate=0.5, min_calls=10, window_s=30, clock=lambda: now[0])
    for i in range(10):
        breaker.record_failure() if i % 3 != 2 else breaker.record_success()
        now[0] += 1
    assert breaker.state == "open"


def test_redaction() -> None:
    redact = Redactor(["sk-live-abcdef123456"])
    text = redact("bad key sk-live-abcdef123456; Authorization: Bearer zzz-secret-token; url?key=AIzaXYZ&x=1")
    assert "abcdef123456" not in text and "zzz-secret-token" not in text and "AIzaXYZ" not in text
    assert "x=1" in text
    assert safe_url("https://user:pw@api.example.com/v1?key=SECRET&a=b") == \
        "https://api.example.com/v1?key=***&a=b"


def test_config_env_only_and_toml(tmp_path: Path) -> None:
    env = {"EDGECLOUD_CLOUD_BASE_URL": "https://api.example.com/v1", "EDGECLOUD_CLOUD_API_KEY": "sk-env-key",
           "EDGECLOUD_CLOUD_MODEL": "m-env"}
    cfg = CloudConfig.from_env_and_toml(None, env)
    assert [p.name for p in cfg.providers] == ["default"]
    assert cfg.providers[0].model == "m-env" and cfg.providers[0].resolved_api_key() == "sk-env-key"
    key_file = tmp_path / "key"
    key_file.write_text("sk-file-key\n")
    toml = tmp_path / "edgecloud.toml"
    toml.write_text(f"""
[cloud]
warmup = false
[[cloud.providers]]
name = "deepseek"
base_url = "https://api.deepseek.com/v1"
api_key_file = "{key_file}"
model = "deepseek-chat"
ttft_timeout_s = 5.0
[[cloud.providers]]
name = "default"
base_url = "https://replaced.example.com/v1"
""")
    cfg = CloudConfig.from_env_and_toml(toml, env)
    assert [p.name for p in cfg.providers] == ["default", "deepseek"]
    assert cfg.providers[0].base_url == "https://api.example.com/v1"
    assert cfg.providers[1].resolved_api_key() == "sk-file-key" and cfg.providers[1].ttft_timeout_s == 5.0
    assert cfg.warmup is False
    assert not CloudConfig.from_env_and_toml(None, {}).enabled


def test_timings_durations() -> None:
    t = CallTimings(dns_ms=1, connect_ms=3, tls_ms=6, request_sent_ms=7, first_byte_ms=20, first_token_ms=25,
                    last_token_ms=40, total_ms=41)
    d = t.durations()
    assert d["dns"] == 1 and d["connect"] == 2 and d["tls"] == 3 and d["first_byte"] == 13
    assert d["last_token"] == 15 and d["total"] == 41


@pytest.mark.anyio
async def test_watchdog_deadlines_and_external_cancel() -> None:
    import asyncio
    import time

    from cloud_bridge.deadline import DeadlineExceeded, Watchdog

    wd = Watchdog()
    wd.set(time.perf_counter() + 0.05, "timeout_ttft")
    with pytest.raises(DeadlineExceeded) as info:
        await wd.wait(asyncio.sleep(5))
    assert info.value.kind == "timeout_ttft"
    # moving the deadline later before it passes keeps the wait alive (the gap timer re-arms)
    wd.set(time.perf_counter() + 0.05, "timeout_gap")
    wd.set(time.perf_counter() + 5, "timeout_gap")
    assert await wd.wait(asyncio.sleep(0.1, result="ok")) == "ok"
    # a deadline already passed fails at once
    wd.set(time.perf_counter() - 1, "timeout_total")
    with pytest.raises(DeadlineExceeded):
        await wd.wait(asyncio.sleep(0))
    wd.close()

    async def waiter() -> None:
        inner = Watchdog()
        inner.set(time.perf_counter() + 5, "timeout_gap")
        await inner.wait(asyncio.sleep(5))

    task = asyncio.create_task(waiter())
    await asyncio.sleep(0.02)
    task.cancel()  # someone else's cancellation is not turned into a timeout
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.anyio
async def test_dns_failure_is_a_fast_connect_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name that does not resolve fails the attempt as ``connect`` with the resolver's reason.

    The resolver failure is simulated (no real DNS may be queried here): only the lookup is faked,
    the bridge, httpx and httpcore run for real against a localhost URL.
    """
    import socket

    from cloud_bridge import CloudBridge, CloudConfig, CloudError, ProviderConfig

    bridge = CloudBridge(CloudConfig(providers=[ProviderConfig(
        base_url="http://localhost:9/v1", max_retries=0)], warmup=False, keep_warm=False))

    async def no_such_name(host: str, port: int, timeout_s: float | None = None) -> float | None:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(bridge._dns, "resolve_timed", no_such_name)
    try:
        with pytest.raises(CloudError) as info:
            async for _ in bridge.stream_chat({"messages": []}, request_id="dns"):
                pass
        assert info.value.kind == "connect" and "DNS lookup of localhost failed" in info.value.message
    finally:
        await bridge.aclose()
