"""The bridge against a real local fake cloud: each fault, what the caller sees, how many attempts.

Servers are real (uvicorn HTTP/1.1, hypercorn HTTP/2 + TLS); only "the internet" is faked.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from typing import Any

import httpx
import pytest

from bench.fake_cloud import FakeCloudHandle, refused_base_url
from cloud_bridge import CallRecord, CloudBridge, CloudError, ContentDelta, StreamDone

from .conftest import cloud, provider

pytestmark = pytest.mark.anyio

BODY = {"messages": [{"role": "user", "content": "one two three four five"}], "max_tokens": 64}
ANSWER = "Echo: one two three four five"


async def collect(bridge: CloudBridge, body: dict[str, Any] | None = None, **kw: Any
                  ) -> tuple[list[str], StreamDone | None, CloudError | None]:
    texts: list[str] = []
    done: StreamDone | None = None
    try:
        async for item in bridge.stream_chat(body or BODY, request_id=kw.pop("request_id", "req-1"), **kw):
            if isinstance(item, ContentDelta):
                texts.append(item.text)
            else:
                done = item
    except CloudError as err:
        return texts, done, err
    return texts, done, None


async def wait_for(predicate: Any, timeout: float = 3.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


async def test_stream_happy_path_http11(fake: FakeCloudHandle) -> None:
    fake.config.api_key = "sk-test-0123456789"
    records: list[CallRecord] = []
    bridge = CloudBridge(cloud(provider(fake, api_key="sk-test-0123456789")), on_call=records.append)
    await bridge.start()
    try:
        texts, done, err = await collect(bridge, request_id="kiosk-42")
        assert err is None and done is not None
        assert "".join(texts) == ANSWER
        assert done.finish_reason == "stop" and done.provider == "a" and done.model == "gpt-4o-mini"
        assert done.usage == {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15}
        assert done.upstream_request_id == "req_fake_1"
        assert done.timings.attempts == 1 and done.timings.http_version == "HTTP/1.1"
        t = done.timings
        assert t.request_sent_ms is not None and t.first_byte_ms is not None and t.first_token_ms is not None
        assert t.request_sent_ms <= t.first_byte_ms <= t.first_token_ms <= t.last_token_ms <= t.total_ms
        assert fake.state.chat_attempts == 1
        assert fake.state.last_headers["x-request-id"] == "kiosk-42"
        assert fake.state.last_headers["authorization"] == "Bearer sk-test-0123456789"
        sent = fake.state.bodies[-1]
        assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
        assert sent["model"] == "gpt-4o-mini" and sent["max_tokens"] == 64
        # one record per attempt plus one for the logical call
        assert [r.logical for r in records] == [False, True] and all(r.ok for r in records)
        # second call reuses the warm pooled connection
        _, done2, _ = await collect(bridge)
        assert done2 is not None and done2.timings.connection_reused
        assert fake.state.connections == 1
        assert bridge.ttft_quantile_s() is not None
    finally:
        await bridge.aclose()


async def test_model_map_and_max_tokens_length(fake: FakeCloudHandle) -> None:
    bridge = CloudBridge(cloud(provider(fake, model="base-model", model_map={"kiosk-model": "big-model"})))
    try:
        body = {**BODY, "max_tokens": 2, "model": "ignored", "stream": False}
        texts, done, err = await collect(bridge, body, route_model="kiosk-model")
        assert err is None and done is not None
        assert "".join(texts) == "Echo: one" and done.finish_reason == "length"
        assert fake.state.bodies[-1]["model"] == "big-model" and done.model == "big-model"
    finally:
        await bridge.aclose()


async def test_http2_tls_warm_and_phases(fake_h2: FakeCloudHandle) -> None:
    bridge = CloudBridge(cloud(provider(fake_h2, base_url=fake_h2.base_url.replace("127.0.0.1", "localhost"))))
    try:
        _, cold, err = await collect(bridge)
        assert err is None and cold is not None
        assert cold.timings.http_version == "HTTP/2" and not cold.timings.connection_reused
        t = cold.timings
        assert t.dns_ms is not None and t.connect_ms is not None and t.tls_ms is not None
        assert t.dns_ms <= t.connect_ms <= t.tls_ms <= t.request_sent_ms  # type: ignore[operator]
        _, warm, _ = await collect(bridge)
        assert warm is not None and warm.timings.connection_reused and warm.timings.tls_ms is None
        assert fake_h2.state.http_versions == ["2", "2"]
        # concurrent calls multiplex on the same HTTP/2 connection
        results = await asyncio.gather(*(collect(bridge) for _ in range(5)))
        assert all(r[2] is None for r in results)
        assert fake_h2.state.connections == 1
    finally:
        await bridge.aclose()


async def test_warmup_and_keep_warm(fake: FakeCloudHandle) -> None:
    bridge = CloudBridge(cloud(provider(fake, keep_warm_interval_s=0.1), warmup=True, keep_warm=True))
    await bridge.start()
    try:
        assert fake.state.models_requests == 1  # warm-up at start
        _, done, _ = await collect(bridge)
        assert done is not None and done.timings.connection_reused  # the escalation paid no handshake
        assert await wait_for(lambda: fake.state.models_requests >= 3)  # idle probes keep it warm
    finally:
        await bridge.aclose()


async def test_429_retry_after_ms_then_success(fake: FakeCloudHandle) -> None:
    fake.set_fault("429", count=1, retry_after=None, retry_after_ms=30)
    records: list[CallRecord] = []
    bridge = CloudBridge(cloud(provider(fake)), on_call=records.append)
    try:
        texts, done, err = await collect(bridge)
        assert err is None and done is not None and "".join(texts) == ANSWER
        assert fake.state.chat_attempts == 2 and done.timings.attempts == 2
        attempts = [r for r in records if not r.logical]
        assert [r.was_429 for r in attempts] == [True, False] and attempts[1].retried
    finally:
        await bridge.aclose()


@pytest.mark.parametrize("header", ["30", "date"])
async def test_429_retry_after_beyond_deadline_is_not_waited(fake: FakeCloudHandle, header: str) -> None:
    value = email.utils.formatdate(time.time() + 30, usegmt=True) if header == "date" else header
    fake.set_fault("429", retry_after=value)
    bridge = CloudBridge(cloud(provider(fake, max_retries=3)))
    try:
        texts, _, err = await collect(bridge, deadline_s=2.0)
        assert err is not None and err.kind == "rate_limited" and err.status == 429
        assert err.before_first_token and texts == []
        assert err.retry_after_s is not None and 25 < err.retry_after_s <= 30
        assert fake.state.chat_attempts == 1
    finally:
        await bridge.aclose()


async def test_5xx_retried_then_success_and_exhausted(fake: FakeCloudHandle) -> None:
    fake.set_fault("status", count=2, fault_status=503)
    bridge = CloudBridge(cloud(provider(fake, max_retries=2)))
    try:
        _, done, err = await collect(bridge)
        assert err is None and done is not None and done.timings.attempts == 3
        assert fake.state.chat_attempts == 3
        fake.state.reset()
        fake.set_fault("status", fault_status=500)
        _, _, err = await collect(bridge)
        assert err is not None and err.kind == "server_error" and err.status == 500
        assert fake.state.chat_attempts == 3
        fake.state.reset()
        fake.set_fault("status", fault_status=501)  # not in the retry list
        _, _, err = await collect(bridge)
        assert err is not None and err.status == 501 and fake.state.chat_attempts == 1
        fake.state.reset()
        fake.set_fault("status", fault_status=400)
        _, _, err = await collect(bridge)
        assert err is not None and err.kind == "upstream_error" and fake.state.chat_attempts == 1
    finally:
        await bridge.aclose()


async def test_refused_connection_fails_over(fake: FakeCloudHandle) -> None:
    records: list[CallRecord] = []
    bridge = CloudBridge(
        cloud(provider(None, name="dead", base_url=refused_base_url(), max_retries=1), provider(fake, name="b")),
        on_call=records.append,
    )
    try:
        texts, done, err = await collect(bridge)
        assert err is None and done is not None and done.provider == "b" and "".join(texts) == ANSWER
        attempts = [r for r in records if not r.logical]
        assert [(r.provider, r.error_kind) for r in attempts] == [("dead", "connect"), ("dead", "connect"),
                                                                   ("b", None)]
        assert fake.state.chat_attempts == 1
    finally:
        await bridge.aclose()


async def test_refused_connection_alone_is_connect_error() -> None:
    bridge = CloudBridge(cloud(provider(None, base_url=refused_base_url(), max_retries=0)))
    try:
        _, _, err = await collect(bridge)
        assert err is not None and err.kind == "connect" and err.before_first_token
    finally:
        await bridge.aclose()


async def test_hang_before_headers_times_out_ttft(fake: FakeCloudHandle) -> None:
    fake.set_fault("hang", hang_s=5)
    bridge = CloudBridge(cloud(provider(fake, ttft_timeout_s=0.3, max_retries=2)))
    try:
        _, _, err = await collect(bridge)
        assert err is not None and err.kind == "timeout_ttft" and err.before_first_token
        assert fake.state.chat_attempts == 1  # not retried on the same provider (it fails over)
    finally:
        await bridge.aclose()


async def test_hang_fails_over_to_next_provider(fake: FakeCloudHandle, fake_h2: FakeCloudHandle) -> None:
    fake.set_fault("hang", hang_s=5)
    bridge = CloudBridge(cloud(provider(fake, ttft_timeout_s=0.3), provider(fake_h2, name="b")))
    try:
        texts, done, err = await collect(bridge)
        assert err is None and done is not None and done.provider == "b" and "".join(texts) == ANSWER
        assert fake.state.chat_attempts == 1 and fake_h2.state.chat_attempts == 1
    finally:
        await bridge.aclose()


async def test_last_real_error_wins_over_open_breaker(fake: FakeCloudHandle) -> None:
    fake.set_fault("status", fault_status=503)
    bridge = CloudBridge(cloud(provider(fake, max_retries=0),
                               provider(None, name="b", base_url=refused_base_url(), max_retries=0,
                                        breaker_consecutive_failures=1, breaker_open_s=30)))
    try:
        await collect(bridge)  # opens b's breaker
        _, _, err = await collect(bridge)
        assert err is not None and err.kind == "server_error" and err.provider == "a"
    finally:
        await bridge.aclose()


async def test_total_deadline(fake: FakeCloudHandle, fake_h2: FakeCloudHandle) -> None:
    fake.set_fault("hang", hang_s=5)
    bridge = CloudBridge(cloud(provider(fake, ttft_timeout_s=5, max_retries=3), provider(fake_h2, name="b")))
    try:
        _, _, err = await collect(bridge, deadline_s=0.3)
        assert err is not None and err.kind == "timeout_total" and fake.state.chat_attempts == 1
        assert fake_h2.state.chat_attempts == 0  # no fail-over once the caller's deadline has passed
    finally:
        await bridge.aclose()


async def test_slow_first_token(fake: FakeCloudHandle) -> None:
    fake.set_fault("slow_first", slow_first_s=0.6)
    slow = CloudBridge(cloud(provider(fake, ttft_timeout_s=0.2, max_retries=0)))
    patient = CloudBridge(cloud(provider(fake, ttft_timeout_s=3.0)))
    try:
        _, _, err = await collect(slow)
        assert err is not None and err.kind == "timeout_ttft"
        texts, done, err = await collect(patient)
        assert err is None and done is not None and "".join(texts) == ANSWER
        assert done.timings.first_token_ms is not None and done.timings.first_token_ms >= 600
    finally:
        await slow.aclose()
        await patient.aclose()


async def test_stall_between_tokens_is_not_retried(fake: FakeCloudHandle) -> None:
    fake.set_fault("stall", stall_after=2, stall_s=3)
    bridge = CloudBridge(cloud(provider(fake, max_gap_s=0.3, max_retries=3)))
    try:
        texts, _, err = await collect(bridge)
        assert texts == ["Echo:", " one"]
        assert err is not None and err.kind == "timeout_gap" and not err.before_first_token
        assert fake.state.chat_attempts == 1
        assert await wait_for(lambda: fake.state.disconnects == 1)  # upstream closed, not left hanging
    finally:
        await bridge.aclose()


async def test_stream_cut_after_first_token(fake: FakeCloudHandle) -> None:
    fake.set_fault("cut", cut_after=2)
    bridge = CloudBridge(cloud(provider(fake, max_retries=3)))
    try:
        texts, done, err = await collect(bridge)
        assert texts == ["Echo:", " one"] and done is None
        assert err is not None and not err.before_first_token and err.kind == "connect"
        assert fake.state.chat_attempts == 1
    finally:
        await bridge.aclose()


async def test_stream_cut_before_first_token_is_retried(fake: FakeCloudHandle) -> None:
    fake.set_fault("cut", count=1, cut_after=0)
    bridge = CloudBridge(cloud(provider(fake)))
    try:
        texts, done, err = await collect(bridge)
        assert err is None and done is not None and "".join(texts) == ANSWER
        assert fake.state.chat_attempts == 2
    finally:
        await bridge.aclose()


async def test_malformed_sse(fake: FakeCloudHandle) -> None:
    fake.set_fault("malformed", malformed_after=0)
    bridge = CloudBridge(cloud(provider(fake)))
    try:
        texts, _, err = await collect(bridge)
        assert texts == [] and err is not None and err.kind == "bad_response" and err.before_first_token
        assert fake.state.chat_attempts == 1
        fake.set_fault("malformed", malformed_after=3)
        texts, _, err = await collect(bridge)
        assert len(texts) == 3 and err is not None and err.kind == "bad_response"
        assert not err.before_first_token
    finally:
        await bridge.aclose()


async def test_sse_quirks_are_parsed(fake: FakeCloudHandle) -> None:
    fake.config.sse_quirks = True
    bridge = CloudBridge(cloud(provider(fake)))
    try:
        texts, done, err = await collect(bridge)
        assert err is None and done is not None and "".join(texts) == ANSWER
        assert done.usage is not None and done.usage["completion_tokens"] == 6
    finally:
        await bridge.aclose()


async def test_error_object_inside_200_stream(fake: FakeCloudHandle) -> None:
    fake.set_fault("error_in_stream", count=1, error_type="server_error")
    bridge = CloudBridge(cloud(provider(fake)))
    try:
        _, done, err = await collect(bridge)  # overload-type error before any token: retried
        assert err is None and done is not None and fake.state.chat_attempts == 2
        fake.state.reset()
        fake.set_fault("error_in_stream", error_type="invalid_request_error")
        _, _, err = await collect(bridge)
        assert err is not None and err.kind == "upstream_error" and err.status == 200
        assert "fake error inside a 200 stream" in err.message and fake.state.chat_attempts == 1
        fake.state.reset()
        fake.set_fault("error_in_stream", error_after=2)
        texts, _, err = await collect(bridge)
        assert len(texts) == 2 and err is not None and not err.before_first_token
    finally:
        await bridge.aclose()


@pytest.mark.parametrize("stream", [True, False])
async def test_huge_body_is_refused(fake: FakeCloudHandle, stream: bool) -> None:
    fake.set_fault("huge", huge_bytes=4 * 1024 * 1024)
    bridge = CloudBridge(cloud(provider(fake, max_response_bytes=1024 * 1024, stream=stream)))
    try:
        _, _, err = await collect(bridge)
        assert err is not None and err.kind == "too_large" and fake.state.chat_attempts == 1
    finally:
        await bridge.aclose()


async def test_non_streaming_upstream(fake: FakeCloudHandle) -> None:
    bridge = CloudBridge(cloud(provider(fake, stream=False)))
    try:
        text, done = await bridge.complete_chat(BODY, request_id="r-ns")
        assert text == ANSWER and done.usage is not None and done.usage["completion_tokens"] == 6
        assert fake.state.bodies[-1]["stream"] is False
        fake.set_fault("status", count=1, fault_status=502)
        text, done = await bridge.complete_chat(BODY, request_id="r-ns2")
        assert text == ANSWER and done.timings.attempts == 2
        fake.set_fault("malformed")
        with pytest.raises(CloudError) as info:
            await bridge.complete_chat(BODY, request_id="r-ns3")
        assert info.value.kind == "bad_response"
    finally:
        await bridge.aclose()


async def test_caller_closing_the_stream_closes_upstream(fake: FakeCloudHandle) -> None:
    fake.config.reply_text = " ".join(f"w{i}" for i in range(200))
    fake.config.tokens_per_s = 20
    records: list[CallRecord] = []
    bridge = CloudBridge(cloud(provider(fake)), on_call=records.append)
    try:
        stream = bridge.stream_chat(BODY, request_id="gone")
        first = await stream.__anext__()
        assert isinstance(first, ContentDelta)
        await stream.aclose()  # the kiosk went away
        assert await wait_for(lambda: fake.state.disconnects == 1)
        assert fake.state.completed_streams == 0
        assert records and records[-1].cancelled and bridge.breaker_states() == {"a": "closed"}
    finally:
        await bridge.aclose()


async def test_task_cancellation_closes_upstream(fake: FakeCloudHandle) -> None:
    fake.config.reply_text = " ".join(f"w{i}" for i in range(200))
    fake.config.tokens_per_s = 20
    bridge = CloudBridge(cloud(provider(fake)))
    got: list[str] = []

    async def consume() -> None:
        async for item in bridge.stream_chat(BODY, request_id="cancel-me"):
            if isinstance(item, ContentDelta):
                got.append(item.text)

    try:
        task = asyncio.create_task(consume())
        assert await wait_for(lambda: len(got) >= 2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await wait_for(lambda: fake.state.disconnects == 1)
    finally:
        await bridge.aclose()


async def test_breaker_opens_fails_over_and_recovers(fake: FakeCloudHandle, fake_h2: FakeCloudHandle) -> None:
    fake.set_fault("status", fault_status=503)
    primary = provider(fake, name="primary", max_retries=0, breaker_consecutive_failures=2, breaker_open_s=0.3)
    bridge = CloudBridge(cloud(primary, provider(fake_h2, name="second")))
    try:
        for _ in range(2):
            _, done, err = await collect(bridge)
            assert err is None and done is not None and done.provider == "second"
        assert bridge.breaker_states()["primary"] == "open"
        assert fake.state.chat_attempts == 2
        _, done, _ = await collect(bridge)  # open: primary is skipped without an attempt
        assert done is not None and done.provider == "second" and fake.state.chat_attempts == 2
        assert bridge.available()
        fake.set_fault("none")
        await asyncio.sleep(0.35)
        assert bridge.breaker_states()["primary"] == "half_open"
        _, done, _ = await collect(bridge)  # the half-open probe succeeds and closes it
        assert done is not None and done.provider == "primary"
        assert bridge.breaker_states()["primary"] == "closed"
    finally:
        await bridge.aclose()


async def test_all_breakers_open_means_unavailable(fake: FakeCloudHandle) -> None:
    fake.set_fault("status", fault_status=500)
    bridge = CloudBridge(cloud(provider(fake, max_retries=0, breaker_consecutive_failures=1, breaker_open_s=30)))
    try:
        await collect(bridge)
        assert not bridge.available()
        _, _, err = await collect(bridge)
        assert err is not None and err.kind == "breaker_open" and fake.state.chat_attempts == 1
    finally:
        await bridge.aclose()


async def test_retry_budget_limits_retry_storm(fake: FakeCloudHandle) -> None:
    fake.set_fault("status", fault_status=503)
    bridge = CloudBridge(cloud(provider(fake, max_retries=2, retry_budget_ratio=0.2,
                                        breaker_consecutive_failures=1000, breaker_min_calls=1000)))
    try:
        for _ in range(20):
            await collect(bridge)
        retries = fake.state.chat_attempts - 20
        assert 10 <= retries <= 10 + 0.2 * 20 + 1e-9  # a full bucket + 20% of traffic, not 2 per call
    finally:
        await bridge.aclose()


async def test_api_key_never_leaks(fake: FakeCloudHandle, caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-wrong-key-abcdefghijkl"
    fake.config.api_key = "sk-the-right-one-000000"
    records: list[CallRecord] = []
    caplog.set_level(logging.DEBUG)
    bridge = CloudBridge(cloud(provider(fake, api_key=secret, base_url=fake.base_url + "?key=" + secret),
                               warmup=True), on_call=records.append)
    await bridge.start()
    try:
        _, _, err = await collect(bridge)
        assert err is not None and err.kind == "auth" and err.status == 401
        assert "Incorrect API key" in err.message  # the upstream's words survive ...
        assert secret not in err.message and secret not in str(err) and secret not in repr(err)  # ... the key not
        assert fake.state.chat_attempts == 1  # auth errors are not retried
        assert secret not in caplog.text
        assert secret not in repr(records)
    finally:
        await bridge.aclose()


async def test_no_provider() -> None:
    bridge = CloudBridge(cloud())
    assert not bridge.enabled and not bridge.available()
    _, _, err = await collect(bridge)
    assert err is not None and err.kind == "no_provider"


async def test_official_openai_client_against_fake(fake: FakeCloudHandle) -> None:
    """Other suites drive the fake with the official client: it must look like the real API."""
    openai = pytest.importorskip("openai")
    async with httpx.AsyncClient() as http:
        client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="sk-x", http_client=http, max_retries=0)
        stream = await client.chat.completions.create(model="fake-gpt", messages=BODY["messages"], stream=True,
                                                      stream_options={"include_usage": True})
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        assert "".join(parts) == ANSWER
        full = await client.chat.completions.create(model="fake-gpt", messages=BODY["messages"])
        assert full.choices[0].message.content == ANSWER and full.usage is not None
        models = await client.models.list()
        assert [m.id for m in models.data] == ["fake-gpt"]


@pytest.mark.parametrize(("fault", "fields", "kind", "texts"), [
    ("cut", {"cut_after": 2}, "connect", 2),
    ("stall", {"stall_after": 1, "stall_s": 3}, "timeout_gap", 1),
    ("malformed", {"malformed_after": 1}, "bad_response", 1),
    ("error_in_stream", {"error_after": 3, "error_type": "invalid_request_error"}, "upstream_error", 3),
])
async def test_mid_stream_faults_over_http2(fake_h2: FakeCloudHandle, fault: str, fields: dict[str, Any],
                                            kind: str, texts: int) -> None:
    fake_h2.set_fault(fault, **fields)
    bridge = CloudBridge(cloud(provider(fake_h2, max_gap_s=0.3, max_retries=2)))
    try:
        got, _, err = await collect(bridge)
        assert len(got) == texts
        assert err is not None and err.kind == kind and not err.before_first_token
        assert fake_h2.state.chat_attempts == 1
        fake_h2.set_fault("none")
        _, done, err = await collect(bridge)  # the pooled HTTP/2 connection still serves
        assert err is None and done is not None
    finally:
        await bridge.aclose()


async def test_429_then_503_over_http2(fake_h2: FakeCloudHandle) -> None:
    fake_h2.set_fault("429", count=1, retry_after=None, retry_after_ms=10)
    bridge = CloudBridge(cloud(provider(fake_h2)))
    try:
        _, done, err = await collect(bridge)
        assert err is None and done is not None and done.timings.attempts == 2
        fake_h2.set_fault("status", count=1, fault_status=502)
        _, done, err = await collect(bridge)
        assert err is None and done is not None and done.timings.attempts == 2
        assert done.timings.http_version == "HTTP/2"
    finally:
        await bridge.aclose()


async def test_slow_consumer_is_not_an_upstream_gap(fake: FakeCloudHandle) -> None:
    bridge = CloudBridge(cloud(provider(fake, max_gap_s=0.2)))
    try:
        texts = []
        async for item in bridge.stream_chat(BODY, request_id="slow-kiosk"):
            if isinstance(item, ContentDelta):
                texts.append(item.text)
                await asyncio.sleep(0.3)  # the kiosk is slower than the gap limit
        assert "".join(texts) == ANSWER
    finally:
        await bridge.aclose()
