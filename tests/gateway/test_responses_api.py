"""``POST /v1/responses`` through the real gateway with the official SDK: text, tools and JSON,
created and streamed, on the same pipeline as chat (route headers, cache, metrics)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from pydantic import BaseModel

from harness import make_settings, run_gateway

SIMPLE = "Where is the nearest restroom?"
TOOLS = [{"type": "function", "name": "show_map", "description": "Show the way to a gate.",
          "parameters": {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"],
                         "additionalProperties": False}, "strict": True}]
FAST = {"connect_timeout_s": 1.0, "ttft_timeout_s": 5.0, "max_gap_s": 5.0, "total_timeout_s": 20.0,
        "max_retries": 0, "keep_warm_interval_s": 600.0, "breaker_consecutive_failures": 10_000,
        "breaker_min_calls": 10_000}


class Gate(BaseModel):
    gate: str
    terminal: int


@pytest.fixture(scope="module")
def gw(tmp_path_factory, cloud, embedded_model):
    settings = make_settings(
        tmp_path_factory.mktemp("responses"),
        cloud={"providers": [{"name": "fake", "base_url": cloud.base_url, "model": "fake-gpt", **FAST}]},
        cache={"enabled": False},
        router={"scenario": "batch"},
    )
    with run_gateway(settings) as handle:
        yield handle


def test_create_text_with_instructions_and_usage(gw, fake):
    client = gw.openai()
    raw = client.responses.with_raw_response.create(
        model="edgecloud-cloud", instructions="You are a kiosk.", input="Where is gate B12?", max_output_tokens=50,
        temperature=0.2, metadata={"kiosk": "T1-04"})
    r = raw.parse()
    assert r.object == "response" and r.status == "completed"
    assert r.output_text == "Echo: Where is gate B12?"
    assert r.usage.input_tokens > 0 and r.usage.output_tokens == 5
    assert r.metadata == {"kiosk": "T1-04"}
    assert raw.headers["x-edgecloud-route"] == "cloud" and raw.headers["x-edgecloud-reason"] == "override"
    sent = fake.state.bodies[-1]
    assert sent["messages"][0] == {"role": "system", "content": "You are a kiosk."}
    assert sent["max_tokens"] == 50 and sent["temperature"] == 0.2


def test_input_messages_go_to_the_cloud_as_a_conversation(gw, fake):
    client = gw.openai()
    r = client.responses.create(model="edgecloud-auto", input=[
        {"role": "user", "content": "I need a taxi"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Where to?"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "The airport"}]},
    ])
    assert r.output_text == "Echo: The airport"
    assert [m["role"] for m in fake.state.bodies[-1]["messages"]] == ["user", "assistant", "user"]


def test_stream_text_events(gw, fake):
    client = gw.openai()
    kinds, deltas = [], []
    with client.responses.stream(model="edgecloud-cloud", input="Hello kiosk") as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.output_text.done" in kinds and "response.output_item.done" in kinds
    assert "".join(deltas) == final.output_text == "Echo: Hello kiosk"
    assert final.usage.output_tokens == 3


def test_create_and_stream_on_the_edge(gw, fake):
    client = gw.openai(timeout=600)
    raw = client.responses.with_raw_response.create(model="edgecloud-auto", input=SIMPLE, max_output_tokens=16)
    assert raw.headers["x-edgecloud-route"] == "edge", raw.headers["x-edgecloud-reason"]
    r = raw.parse()
    assert r.output_text and r.status in ("completed", "incomplete")
    with client.responses.stream(model="edgecloud-edge", input=SIMPLE, max_output_tokens=8) as stream:
        events = list(stream)  # cut by max_output_tokens: OpenAI's response.incomplete, not .completed
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.usage.output_tokens == 8 and last.response.output[0].content[0].text


def test_function_tools_created_and_streamed_then_a_follow_up(gw, fake):
    client = gw.openai()
    r = client.responses.create(model="edgecloud-auto", input="Show me gate B12", tools=TOOLS)
    [call] = r.output
    assert call.type == "function_call" and call.name == "show_map"
    assert json.loads(call.arguments) == {"gate": "B12"}
    assert fake.state.bodies[-1]["tools"] == [{"type": "function", "function": {
        k: TOOLS[0][k] for k in ("name", "description", "parameters", "strict")}}]
    fragments = []
    with client.responses.stream(model="edgecloud-auto", input="Show me gate B12", tools=TOOLS,
                                 tool_choice={"type": "function", "name": "show_map"}) as stream:
        for event in stream:
            if event.type == "response.function_call_arguments.delta":
                fragments.append(event.delta)
        final = stream.get_final_response()
    [call] = final.output
    assert len(fragments) > 1 and "".join(fragments) == call.arguments
    assert fake.state.bodies[-1]["tool_choice"] == {"type": "function", "function": {"name": "show_map"}}
    follow = client.responses.create(model="edgecloud-auto", tools=TOOLS, input=[
        {"role": "user", "content": "Show me gate B12"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "shown"},
    ])
    assert follow.output_text == "Done: shown"
    sent = fake.state.bodies[-1]["messages"]
    assert sent[1]["tool_calls"][0]["id"] == call.call_id and sent[2]["tool_call_id"] == call.call_id


def test_json_schema_text_format_on_the_edge(gw, fake):
    client = gw.openai(timeout=600)
    raw = client.responses.with_raw_response.parse(model="edgecloud-auto", input=SIMPLE, text_format=Gate,
                                                   max_output_tokens=200, temperature=0)
    assert raw.headers["x-edgecloud-route"] == "edge", raw.headers["x-edgecloud-reason"]
    assert isinstance(raw.parse().output_parsed, Gate)
    with client.responses.stream(model="edgecloud-cloud", input="gate", text_format=Gate) as stream:
        final = stream.get_final_response()
    assert isinstance(final.output_parsed, Gate)
    assert fake.state.bodies[-1]["response_format"]["json_schema"]["name"] == "Gate"


def test_a_cut_stream_ends_with_error_and_response_failed(gw, fake):
    fake.set_fault("cut", cut_after=1)
    r = httpx.post(gw.base_url + "/v1/responses", timeout=60, json={
        "model": "edgecloud-cloud", "input": "Show me gate B12", "tools": TOOLS, "stream": True})
    kinds = [line[7:] for line in r.text.splitlines() if line.startswith("event: ")]
    assert kinds[-2:] == ["error", "response.failed"]
    assert "response.completed" not in kinds and "response.function_call_arguments.done" not in kinds


@pytest.mark.parametrize(("body", "param", "code"), [
    ({"previous_response_id": "resp_1"}, "previous_response_id", "unsupported_parameter"),
    ({"store": True}, "store", "unsupported_parameter"),
    ({"reasoning": {"effort": "low"}}, "reasoning", "unsupported_parameter"),
    ({"truncation": "auto"}, "truncation", "unsupported_parameter"),
    ({"frobnicate": 1}, "frobnicate", "unknown_parameter"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type", "unsupported_parameter"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0].type", "unsupported_parameter"),
    ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name", "invalid_value"),
    ({"text": {"verbosity": "low"}}, "text.verbosity", "unsupported_parameter"),
    ({"max_output_tokens": 0}, "max_output_tokens", "invalid_value"),
    ({"input": []}, "input", "invalid_type"),
])
def test_unsupported_and_bad_fields_are_400s_naming_them(gw, fake, body, param, code):
    r = httpx.post(gw.base_url + "/v1/responses", timeout=30, json={"model": "edgecloud-auto", "input": "hi", **body})
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["param"], r.json()["error"]["code"]) == (param, code)
    assert fake.state.chat_attempts == 0


def test_sdk_sees_previous_response_id_refused(gw, fake):
    with pytest.raises(openai.BadRequestError, match="keeps no responses"):
        gw.openai().responses.create(model="edgecloud-auto", input="and then?", previous_response_id="resp_abc")
