"""The router wired into the real gateway: real classifier, embedded model, a local fake cloud."""

from __future__ import annotations

import concurrent.futures as cf
import json
import time

import httpx
import pytest

from bench.fake_cloud import FakeCloudConfig, refused_base_url, run_fake_cloud_in_thread
from harness import make_settings, run_gateway

SIMPLE = "Where is the nearest restroom?"
COMPLEX = "Prove that the square root of 2 is irrational, step by step."
FAST = {"connect_timeout_s": 1.0, "ttft_timeout_s": 5.0, "max_gap_s": 5.0, "total_timeout_s": 20.0,
        "backoff_base_s": 0.01, "backoff_max_s": 0.05, "keep_warm_interval_s": 600.0, "max_retries": 1}


def chat(gw, content, model="edgecloud-auto", stream=False, headers=None, **body):
    messages = content if isinstance(content, list) else [{"role": "user", "content": content}]
    return httpx.post(gw.base_url + "/v1/chat/completions", timeout=60, headers=headers or {},
                      json={"model": model, "messages": messages, "max_tokens": 16, "stream": stream, **body})


def kept_on_the_edge_by_the_classifier(out: dict) -> bool:
    """A ``/v1/route`` answer whose classifier kept the request on the device. The live state may still
    send it away as ``edge-busy``: on a loaded machine (the suite runs in two workers) the embedded
    model's measured prefill can put a long prompt's expected first token past the realtime budget."""
    judged = out["label"] == "simple" and not any(rule.startswith("low-confidence") for rule in out["rules"])
    return judged and (out["route"] == "edge" or out["reason"] == "edge-busy")


def sse_events(r: httpx.Response) -> list:
    return [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]


@pytest.fixture(scope="module")
def cloud():
    handle = run_fake_cloud_in_thread(FakeCloudConfig(reply_text="Cloud answer here."))
    yield handle
    handle.stop()


@pytest.fixture
def fake(cloud):
    cloud.set_fault("none", first_token_delay_s=0.0)
    cloud.state.reset()
    return cloud


def gateway_settings(tmp, base_url, router=None, edge=None, **provider):
    return make_settings(
        tmp,
        cloud={"providers": [{"name": "fake", "base_url": base_url, "api_key": "sk-test-secret-1234",
                              "model": "fake-gpt", **FAST, **provider}]},
        cache={"enabled": False},
        router=router or {},
        edge=edge or {},
    )


@pytest.fixture(scope="module")
def gw(tmp_path_factory, cloud, embedded_model):
    # The breaker stays closed here whatever faults a test injects, so tests do not depend on order.
    settings = gateway_settings(tmp_path_factory.mktemp("route"), cloud.base_url,
                                breaker_consecutive_failures=10_000, breaker_min_calls=10_000)
    with run_gateway(settings) as handle:
        yield handle


def test_simple_question_is_answered_on_the_edge(gw, fake):
    r = chat(gw, SIMPLE)
    assert r.status_code == 200, r.text
    assert r.headers["x-edgecloud-route"] == "edge"
    assert r.headers["x-edgecloud-reason"].startswith("classifier:simple:")
    assert fake.state.chat_attempts == 0


@pytest.mark.parametrize("text", [COMPLEX, "写一个校验IPv6的正则表达式", "Write a Python function that merges two "
                                  "sorted linked lists and explain its complexity."])
def test_complex_request_goes_to_the_cloud(gw, fake, text):
    r = chat(gw, text)
    assert r.status_code == 200, r.text
    assert r.headers["x-edgecloud-route"] == "cloud"
    assert r.headers["x-edgecloud-reason"].startswith("classifier:complex:")
    assert r.json()["choices"][0]["message"]["content"] == "Cloud answer here."
    assert fake.state.request_ids[-1] == r.headers["x-request-id"], "the request id goes upstream"
    assert fake.state.last_headers.get("authorization") == "Bearer sk-test-secret-1234"


def test_multi_turn_goes_to_the_cloud(gw, fake):
    convo = [{"role": "user", "content": "I need a taxi"}, {"role": "assistant", "content": "Where to?"},
             {"role": "user", "content": "The airport"}]
    r = chat(gw, convo)
    assert (r.headers["x-edgecloud-route"], r.headers["x-edgecloud-reason"]) == ("cloud", "multi-turn")


def test_overrides_by_model_and_header(gw, fake):
    assert chat(gw, COMPLEX, model="edgecloud-edge").headers["x-edgecloud-route"] == "edge"
    assert chat(gw, SIMPLE, model="edgecloud-cloud").headers["x-edgecloud-route"] == "cloud"
    r = chat(gw, SIMPLE, headers={"x-edgecloud-route": "cloud"})
    assert (r.headers["x-edgecloud-route"], r.headers["x-edgecloud-reason"]) == ("cloud", "override")


def test_tools_go_to_the_cloud_with_the_tools(gw, fake):
    tools = [{"type": "function", "function": {"name": "find_store", "parameters": {"type": "object"}}}]
    r = chat(gw, "Find the Apple store", tools=tools)
    route = (r.headers["x-edgecloud-route"], r.headers["x-edgecloud-reason"])
    assert route == ("cloud", "tools:template-without-tools")
    assert fake.state.bodies[-1]["tools"] == tools


def test_streaming_from_the_cloud(gw, fake):
    r = chat(gw, COMPLEX, model="edgecloud-cloud", stream=True, stream_options={"include_usage": True})
    events = sse_events(r)
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                   for e in events[:-1] if json.loads(e).get("choices"))
    assert text == "Cloud answer here."
    assert json.loads(events[-2])["usage"]["completion_tokens"] > 0


def test_route_endpoint_explains_without_generating(gw, fake):
    before = gw.services.edge.generations_started
    r = httpx.post(gw.base_url + "/v1/route", json={"messages": [{"role": "user", "content": COMPLEX}]})
    out = r.json()
    assert out["route"] == "cloud" and out["label"] == "complex" and 0.5 <= out["confidence"] <= 1
    assert out["prompt_tokens"] > 5 and out["rules"][0].startswith("classifier:complex")
    r = httpx.post(gw.base_url + "/v1/route", json={"messages": [{"role": "user", "content": SIMPLE}]})
    assert kept_on_the_edge_by_the_classifier(r.json()), r.json()
    assert gw.services.edge.generations_started == before and fake.state.chat_attempts == 0


@pytest.mark.parametrize("text", [
    "Hi! We drove four hours to get here, the kids slept the whole way and now they are wide awake and want "
    "to see everything at once, and my husband is already complaining about his feet. Where is the aquarium?",
    "你好，我们刚从外地过来，开了三个小时的车，孩子在车上睡了一路，现在精神得很，我老公已经在喊脚疼了。请问水族馆在哪里？",
])
def test_route_keeps_a_chatty_simple_question_on_the_edge_and_names_its_threshold(gw, fake, text):
    """What a kiosk app sees from POST /v1/route with a cloud configured: the device answers, and the decision
    says which threshold applied and where it came from (the classifier's card)."""
    out = httpx.post(gw.base_url + "/v1/route", json={"messages": [{"role": "user", "content": text}]}).json()
    assert kept_on_the_edge_by_the_classifier(out), out
    card = gw.services.classifier.card["thresholds"]
    assert out["threshold"] == card["simple_min_confidence"]
    assert out["threshold_source"].startswith("model card") and "complex recall" in out["threshold_source"]


def test_cloud_failing_before_first_token_falls_back_to_the_edge(gw, fake):
    fake.set_fault("status", fault_status=503)
    convo = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
             {"role": "user", "content": "Where can I buy a phone charger?"}]
    r = chat(gw, convo)  # multi-turn: the cloud's; it fails, the edge may answer degraded
    assert r.status_code == 200, r.text
    assert r.headers["x-edgecloud-route"] == "edge"
    assert r.headers["x-edgecloud-reason"].startswith("fallback:cloud-")
    assert r.headers["x-edgecloud-degraded"] == "cloud-unavailable"
    # A complex request is not answered by the small model: a clean error instead.
    r = chat(gw, COMPLEX)
    assert r.status_code in (502, 503, 504)
    assert r.json()["error"]["code"].startswith("cloud_")


def test_cut_mid_stream_ends_with_error_event_then_done(gw, fake):
    fake.set_fault("cut", cut_after=2)
    r = chat(gw, COMPLEX, model="edgecloud-cloud", stream=True)
    assert r.status_code == 200
    events = sse_events(r)
    assert events[-1] == "[DONE]"
    assert "error" in json.loads(events[-2])
    assert any(json.loads(e).get("choices") and json.loads(e)["choices"][0]["delta"].get("content")
               for e in events[:-2])


def test_cloud_down_degraded_and_complex_503(tmp_path, embedded_model):
    with run_gateway(gateway_settings(tmp_path, refused_base_url(), breaker_consecutive_failures=1)) as gw:
        convo = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                 {"role": "user", "content": "Where is the food court?"}]
        r = chat(gw, convo)
        assert r.status_code == 200 and r.headers["x-edgecloud-route"] == "edge"
        assert r.headers["x-edgecloud-degraded"] == "cloud-unavailable"
        # The breaker is now open: the router knows before trying.
        r = chat(gw, convo)
        assert r.headers["x-edgecloud-reason"] == "multi-turn:degraded"
        r = chat(gw, COMPLEX)
        assert r.status_code == 503
        assert "needs the cloud" in r.json()["error"]["message"]


def test_edge_busy_escalates_to_the_cloud(tmp_path, cloud, embedded_model):
    cloud.set_fault("none", first_token_delay_s=0.0)
    with run_gateway(gateway_settings(tmp_path, cloud.base_url, edge={"max_queue": 1})) as gw:
        n = gw.settings.edge.parallel + 6  # more than the slots and the one queue place
        with cf.ThreadPoolExecutor(n) as pool:
            results = list(pool.map(lambda _: chat(gw, SIMPLE, max_tokens=48), range(n)))
        assert [r.status_code for r in results] == [200] * n
        reasons = [r.headers["x-edgecloud-reason"] for r in results]
        routes = [r.headers["x-edgecloud-route"] for r in results]
        assert "edge" in routes and "cloud" in routes, reasons
        assert any(x == "edge-busy" or x.startswith("fallback:edge-") for x in reasons), reasons


def test_hedge_slow_cloud_edge_wins(tmp_path, cloud, embedded_model):
    cloud.set_fault("none", first_token_delay_s=8.0)
    cloud.state.reset()
    router = {"confidence_threshold": 1.01, "hedge_delay_s": 0.2}  # every `simple` is borderline
    with run_gateway(gateway_settings(tmp_path, cloud.base_url, router=router, ttft_timeout_s=20.0)) as gw:
        started = time.perf_counter()
        r = chat(gw, SIMPLE, stream=True)
        assert r.status_code == 200
        assert (r.headers["x-edgecloud-route"], r.headers["x-edgecloud-reason"]) == ("edge", "hedge:edge-won")
        assert time.perf_counter() - started < 8.0
        assert sse_events(r)[-1] == "[DONE]"
        deadline = time.monotonic() + 5
        while cloud.state.disconnects == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cloud.state.disconnects >= 1, "the losing cloud request was cancelled upstream"
    cloud.set_fault("none", first_token_delay_s=0.0)


def test_hedge_fast_cloud_wins_and_edge_never_starts(tmp_path, cloud, embedded_model):
    cloud.set_fault("none", first_token_delay_s=0.0)
    router = {"confidence_threshold": 1.01, "hedge_delay_s": 3.0}
    with run_gateway(gateway_settings(tmp_path, cloud.base_url, router=router)) as gw:
        before = gw.services.edge.generations_started
        r = chat(gw, SIMPLE)
        assert r.headers["x-edgecloud-route"] == "cloud"
        assert r.headers["x-edgecloud-reason"].endswith(":low-confidence")
        assert gw.services.edge.generations_started == before


def test_non_streaming_cut_mid_answer_is_answered_by_the_edge(gw, fake):
    fake.set_fault("cut", cut_after=2)
    convo = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
             {"role": "user", "content": "Is there a pharmacy here?"}]
    r = chat(gw, convo)  # nothing reached the kiosk when the cloud broke: the edge answers instead
    assert r.status_code == 200, r.text
    assert r.headers["x-edgecloud-route"] == "edge"
    assert r.headers["x-edgecloud-reason"].startswith("fallback:cloud-")
    # Forced to the cloud: no substitute, a clean error.
    r = chat(gw, "Hi", model="edgecloud-cloud")
    assert r.status_code in (502, 504) and r.json()["error"]["code"].startswith("cloud_")


# ----- the early start (edge/pipeline.py: Pipeline._refine_while_starting) --------------------------------
# Texts written for this test (not from any evaluation set) on which the shipped n-gram stage is unsure:
SWITCH_TO_CLOUD = "孩子连着两天咳嗽发烧是什么病"  # n-gram: simple, on the device; encoder: complex
SWITCH_TO_EDGE = "My sister bet me a coffee that koalas are bears. Are they?"  # n-gram: low confidence; encoder: simple
KEPT_ON_EDGE = "我跟朋友打赌，他说香蕉是长在树上的，我说不是。谁赢了？"  # both stages: simple


def _route_and_timing(gw, text):
    """One streamed request through the official openai client: route, reason, Server-Timing marks, text."""
    with gw.openai().chat.completions.with_streaming_response.create(
            model="edgecloud-auto", messages=[{"role": "user", "content": text}], max_tokens=8, stream=True) as raw:
        marks = {part.split(";dur=")[0].strip(): float(part.split(";dur=")[1])
                 for part in raw.headers["server-timing"].split(",")}
        route, reason = raw.headers["x-edgecloud-route"], raw.headers["x-edgecloud-reason"]
        text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
    return route, reason, marks, text


def _early_starts(gw) -> dict:
    from tests.observability.helpers import metric_values, value

    values = metric_values(httpx.get(gw.base_url + "/metrics", timeout=10).text)
    return {(backend, outcome): value(values, "edgecloud_early_starts_total", backend=backend, outcome=outcome)
            for backend in ("edge", "cloud") for outcome in ("used", "dropped")}


def test_the_encoder_decides_while_both_backends_start(gw, fake):
    before = _early_starts(gw)
    out = httpx.post(gw.base_url + "/v1/route", json={"model": "edgecloud-auto", "messages": [
        {"role": "user", "content": SWITCH_TO_CLOUD}]}, timeout=30).json()
    assert (out["route"], out["classifier_stage"], out["label"]) == ("cloud", "encoder", "complex")

    # n-gram stage: the device; the encoder: complex. The device's early start is dropped, the cloud answers,
    # and it had been called before the encoder ended (the default early start calls both).
    route, reason, marks, text = _route_and_timing(gw, SWITCH_TO_CLOUD)
    assert (route, reason, text) == ("cloud", out["reason"], "Cloud answer here.")
    assert marks["route"] < marks["encoder"] <= marks["ttft"]
    assert fake.state.chat_attempts == 1

    # the other way: n-gram stage low-confidence (the cloud), the encoder: simple. The device answers.
    route, reason, marks, _ = _route_and_timing(gw, SWITCH_TO_EDGE)
    assert route == "edge" and reason.startswith("classifier:simple:")
    assert marks["route"] < marks["encoder"] <= marks["ttft"]

    # both stages agree
    route, reason, marks, text = _route_and_timing(gw, KEPT_ON_EDGE)
    assert route == "edge" and reason.startswith("classifier:simple:") and text
    # Every unsure request started both backends; what the answer did not take was dropped. (Whether a dropped
    # cloud call reached the fake before it was closed is a race, so /metrics, which counts starts, is read.)
    after = _early_starts(gw)
    assert {key: after.get(key, 0) - before.get(key, 0) for key in after} == {
        ("cloud", "used"): 1, ("edge", "used"): 2, ("cloud", "dropped"): 2, ("edge", "dropped"): 1}

    # the dropped local start left no slot taken: a plain question still answers on the device
    r = chat(gw, SIMPLE)
    assert r.status_code == 200 and r.headers["x-edgecloud-route"] == "edge"
