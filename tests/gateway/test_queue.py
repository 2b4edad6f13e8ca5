"""Past the edge model's slots requests queue, a full queue is 503, a gone client frees its slot."""

from __future__ import annotations

import concurrent.futures as cf
import time

import httpx
import pytest

from harness import make_settings, run_gateway

MESSAGES = [{"role": "user", "content": "Tell me about the food court."}]


def post(base: str, max_tokens: int = 12, stream: bool = False) -> httpx.Response:
    return httpx.post(base + "/v1/chat/completions", timeout=120,
                      json={"model": "edgecloud-edge", "messages": MESSAGES, "max_tokens": max_tokens,
                            "stream": stream})


def test_concurrent_requests_queue_and_all_succeed(edge_gateway):
    with cf.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda _: post(edge_gateway.base_url, 8), range(6)))
    assert [r.status_code for r in results] == [200] * 6
    waits = sorted(r.json()["timings"]["queue_ms"] for r in results)
    assert waits[-1] > waits[0], "later requests waited for earlier ones"


@pytest.fixture(scope="module")
def tiny_queue_gateway(tmp_path_factory, embedded_model):
    settings = make_settings(tmp_path_factory.mktemp("tinyq"), edge={"max_queue": 1, "parallel": 2},
                             cache={"enabled": False})
    with run_gateway(settings) as gw:
        yield gw


def test_full_queue_is_503_with_retry_after(tiny_queue_gateway):
    slots = tiny_queue_gateway.settings.edge.parallel
    n = slots + 4  # every slot, the one queue place, and three more
    with cf.ThreadPoolExecutor(n) as pool:
        results = list(pool.map(lambda _: post(tiny_queue_gateway.base_url, 48), range(n)))
    codes = sorted(r.status_code for r in results)
    assert codes.count(200) >= slots + 1, codes  # every slot answering + one queued at least
    busy = [r for r in results if r.status_code == 503]
    assert busy, codes
    for r in busy:
        assert int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["code"] == "edge_busy"


def test_disconnect_mid_stream_frees_the_model(tiny_queue_gateway):
    gw = tiny_queue_gateway
    edge = gw.services.edge
    with httpx.stream("POST", gw.base_url + "/v1/chat/completions", timeout=60, json={
        "model": "edgecloud-edge", "messages": [{"role": "user", "content": "Write a very long essay."}],
        "max_tokens": 1500, "stream": True,
    }) as r:
        got = 0
        for line in r.iter_lines():
            if line.startswith("data: ") and '"content"' in line:
                got += 1
                if got >= 3:
                    break
        assert edge.queue_depth == 1
    # The client is gone: the generation stops at the next token.
    deadline = time.monotonic() + 10
    while edge.queue_depth and time.monotonic() < deadline:
        time.sleep(0.01)
    assert edge.queue_depth == 0, "generation kept running after the client left"
    started = time.perf_counter()
    r = post(gw.base_url, 4)
    assert r.status_code == 200
    assert r.json()["timings"]["queue_ms"] < 1000  # nothing ahead of it: no waiting on a dead stream
    assert time.perf_counter() - started < 30
