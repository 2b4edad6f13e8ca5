"""The OpenAI-compatible surface, driven by the official openai client against the real server."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

KIOSK_SYSTEM = "You are the help desk of Riverside Mall. Answer in one short sentence."


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": KIOSK_SYSTEM}, {"role": "user", "content": text}]


def test_health_and_models(edge_gateway):
    assert httpx.get(edge_gateway.base_url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(edge_gateway.base_url + "/readyz")
    assert ready.status_code == 200 and ready.json()["model"].endswith(".gguf")
    ids = [m.id for m in edge_gateway.openai().models.list().data]
    assert {"edgecloud-auto", "edgecloud-edge", "edgecloud-cloud", "gpt-4o-mini", "kiosk-fast"} <= set(ids)


def test_non_streaming_completion_with_usage_and_headers(edge_gateway):
    client = edge_gateway.openai()
    raw = client.chat.completions.with_raw_response.create(
        model="edgecloud-edge", messages=ask("Where is the restroom?"), max_tokens=24, temperature=0,
        extra_headers={"x-request-id": "kiosk-42"},
    )
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content.strip()
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage.prompt_tokens > 10 and completion.usage.completion_tokens > 0
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    assert raw.headers["x-request-id"] == "kiosk-42"
    assert raw.headers["x-edgecloud-route"] == "edge"
    timing = raw.headers["server-timing"]
    for phase in ("queue", "prefill", "ttft", "total"):
        assert f"{phase};dur=" in timing


def test_alias_and_default_model(edge_gateway):
    client = edge_gateway.openai()
    for model in ("gpt-4o-mini", "kiosk-fast", "edgecloud-auto"):
        r = client.chat.completions.create(model=model, messages=ask("Hello!"), max_tokens=4)
        assert r.model == model
    # A body without "model" is the default route.
    r = httpx.post(edge_gateway.base_url + "/v1/chat/completions",
                   json={"messages": ask("Hi"), "max_tokens": 3}, timeout=60)
    assert r.status_code == 200, r.text


def test_unknown_model_is_404_model_not_found(edge_gateway):
    with pytest.raises(openai.NotFoundError) as err:
        edge_gateway.openai().chat.completions.create(model="gpt-5-ultra", messages=ask("Hi"))
    assert err.value.body["code"] == "model_not_found"
    assert err.value.body["param"] == "model"


def test_streaming_wire_format_with_usage_and_timings(edge_gateway):
    lines = []
    with httpx.stream(
        "POST", edge_gateway.base_url + "/v1/chat/completions", timeout=60,
        json={"model": "edgecloud-edge", "messages": ask("What time does the mall open?"), "max_tokens": 16,
              "stream": True, "stream_options": {"include_usage": True}},
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-edgecloud-route"] == "edge"
        assert "ttft;dur=" in r.headers["server-timing"]
        for line in r.iter_lines():
            if line:
                lines.append(line)
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    contents = [e for e in events if e["choices"] and e["choices"][0]["delta"].get("content")]
    assert contents, "no content deltas"
    finish = [e for e in events if e["choices"] and e["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and finish[0]["choices"][0]["finish_reason"] in ("stop", "length")
    usage = events[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] > 0
    assert events.index(finish[0]) == len(events) - 2, "finish chunk, then usage, then [DONE]"
    assert usage["timings"]["route"] == "edge" and usage["timings"]["ttft_ms"] > 0
    assert {e["id"] for e in events} == {events[0]["id"]}


def test_streaming_with_openai_client(edge_gateway):
    stream = edge_gateway.openai().chat.completions.create(
        model="edgecloud-edge", messages=ask("Say hello to a visitor."), max_tokens=12, stream=True,
        stream_options={"include_usage": True},
    )
    text, usage = "", None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage:
            usage = chunk.usage
    assert text.strip() and usage is not None and usage.completion_tokens > 0


def test_stop_sequence_cuts_the_answer(edge_gateway):
    client = edge_gateway.openai()
    messages = ask("Count from one to ten in words, separated by commas.")
    full = client.chat.completions.create(model="edgecloud-edge", messages=messages, max_tokens=40,
                                          temperature=0, seed=7).choices[0].message.content
    words = [w for w in full.replace(",", " ").split() if len(w) >= 3]
    assert len(words) >= 3, full
    stop = words[2]
    cut = client.chat.completions.create(model="edgecloud-edge", messages=messages, max_tokens=40,
                                         temperature=0, seed=7, stop=[stop, "@@never@@"])
    text = cut.choices[0].message.content
    assert stop not in text
    assert full.startswith(text)
    assert cut.choices[0].finish_reason == "stop"
    # Streaming honours the same stop sequence.
    streamed = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(model="edgecloud-edge", messages=messages, max_tokens=40,
                                                temperature=0, seed=7, stop=stop, stream=True)
        if c.choices
    )
    assert streamed == text


def test_greedy_answers_are_reproducible_and_reuse_the_system_prompt(edge_gateway):
    client = edge_gateway.openai()
    system = KIOSK_SYSTEM + " " + "The mall has three floors, a food court, two pharmacies and a cinema. " * 4
    first = client.chat.completions.with_raw_response.create(
        model="edgecloud-edge", messages=[{"role": "system", "content": system},
                                          {"role": "user", "content": "Is there a cinema?"}],
        max_tokens=8, temperature=0)
    second = client.chat.completions.with_raw_response.create(
        model="edgecloud-edge", messages=[{"role": "system", "content": system},
                                          {"role": "user", "content": "Is there a pharmacy?"}],
        max_tokens=8, temperature=0)
    body = json.loads(second.http_response.text)
    # The shared system prompt stayed in the KV cache: only the new user turn was prefilled.
    assert body["timings"]["prompt_tokens_reused"] >= 60, body["timings"]
    assert first.parse().choices[0].message.content


def test_max_completion_tokens_limits_length(edge_gateway):
    r = edge_gateway.openai().chat.completions.create(
        model="edgecloud-edge", messages=ask("Tell me a long story about a dragon."), max_completion_tokens=5)
    assert r.usage.completion_tokens <= 5
    assert r.choices[0].finish_reason == "length"


def test_embedded_model_is_the_pinned_file(embedded_model):
    import hashlib

    from edge.model_loader import EMBEDDED_MODEL_SHA256

    digest = hashlib.sha256()
    with embedded_model.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    assert digest.hexdigest() == EMBEDDED_MODEL_SHA256
