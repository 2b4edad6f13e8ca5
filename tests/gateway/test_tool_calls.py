"""Tool calls through the real gateway, from the fake cloud, as the official ``openai`` SDK sees them.

The fake cloud streams each call's arguments in 7-character fragments, one chunk each, the way
OpenAI does; the SDK's stream helper must assemble them, and the gateway must pass them on as
they come, never cache them, and never let a cut stream look like a finished call.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from harness import make_settings, run_gateway

TOOLS = [
    {"type": "function", "function": {
        "name": "show_map", "description": "Show the way to a place in the airport.",
        "parameters": {"type": "object", "properties": {"gate": {"type": "string"}, "floor": {"type": "integer"}},
                       "required": ["gate"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "print_ticket", "description": "Print the traveller's ticket.",
        "parameters": {"type": "object", "properties": {"booking": {"type": "string"}}, "required": ["booking"]}}},
]
ASK = [{"role": "user", "content": "Show me the way to gate B12"}]
FAST = {"connect_timeout_s": 1.0, "ttft_timeout_s": 5.0, "max_gap_s": 5.0, "total_timeout_s": 20.0,
        "backoff_base_s": 0.01, "backoff_max_s": 0.05, "keep_warm_interval_s": 600.0, "max_retries": 0,
        "breaker_consecutive_failures": 10_000, "breaker_min_calls": 10_000}


@pytest.fixture(scope="module")
def gw(tmp_path_factory, cloud, embedded_model):
    settings = make_settings(
        tmp_path_factory.mktemp("tools"),
        cloud={"providers": [{"name": "fake", "base_url": cloud.base_url, "model": "fake-gpt", **FAST}]},
        cache={"enabled": True},
    )
    with run_gateway(settings) as handle:
        yield handle


def test_non_streaming_tool_call_comes_back_whole(gw, fake):
    client = gw.openai()
    raw = client.chat.completions.with_raw_response.create(model="edgecloud-auto", messages=ASK, tools=TOOLS)
    r = raw.parse()
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert (call.type, call.function.name) == ("function", "show_map")
    assert json.loads(call.function.arguments) == {"gate": "B12", "floor": 1}
    assert call.id.startswith("call_")
    assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0
    assert raw.headers["x-edgecloud-route"] == "cloud"
    assert raw.headers["x-edgecloud-reason"] == "tools:template-without-tools"
    assert "total;dur=" in raw.headers["server-timing"]
    body = raw.http_response.json()
    assert body["timings"]["route"] == "cloud"
    sent = fake.state.bodies[-1]
    assert sent["tools"] == TOOLS, "the cloud gets the tools unchanged"


def test_streamed_tool_call_is_assembled_by_the_sdk_helper(gw, fake):
    client = gw.openai()
    fragments = []
    with client.chat.completions.stream(model="edgecloud-auto", messages=ASK, tools=TOOLS,
                                        stream_options={"include_usage": True}) as stream:
        for event in stream:
            if event.type == "tool_calls.function.arguments.delta":
                fragments.append(event.arguments_delta)
        final = stream.get_final_completion()
    assert len(fragments) > 2, "argument fragments are passed on as they arrive"
    [call] = final.choices[0].message.tool_calls
    assert call.function.name == "show_map"
    assert json.loads(call.function.arguments) == {"gate": "B12", "floor": 1}
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.usage is not None and final.usage.completion_tokens > 0


def test_stream_chunks_have_openai_shape(gw, fake):
    r = httpx.post(gw.base_url + "/v1/chat/completions", timeout=60, json={
        "messages": ASK, "tools": TOOLS, "stream": True})
    chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks
             if c["choices"] and c["choices"][0]["delta"].get("tool_calls")]
    first, rest = calls[0], calls[1:]
    assert first["index"] == 0 and first["id"].startswith("call_") and first["type"] == "function"
    assert first["function"]["name"] == "show_map"
    assert all("id" not in c and "name" not in c["function"] for c in rest)
    assert "".join(c["function"]["arguments"] for c in calls) == json.dumps({"gate": "B12", "floor": 1})
    last = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]][-1]
    assert last["choices"][0]["finish_reason"] == "tool_calls"
    assert last["timings"]["route"] == "cloud"
    assert r.text.rstrip().endswith("data: [DONE]")


def test_parallel_calls_and_named_tool_choice(gw, fake):
    fake.config.tool_calls = [{"name": "show_map", "arguments": {"gate": "B12"}},
                              {"name": "print_ticket", "arguments": {"booking": "XK42"}}]
    client = gw.openai()
    with client.chat.completions.stream(model="edgecloud-auto", messages=ASK, tools=TOOLS) as stream:
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["show_map", "print_ticket"]
    assert json.loads(calls[1].function.arguments) == {"booking": "XK42"}
    assert len({c.id for c in calls}) == 2
    fake.config.tool_calls = None
    for choice in ("required", "none", {"type": "function", "function": {"name": "print_ticket"}}):
        r = client.chat.completions.create(model="edgecloud-cloud", messages=ASK, tools=TOOLS, tool_choice=choice,
                                           parallel_tool_calls=False)
        assert fake.state.bodies[-1]["tool_choice"] == choice, "tool_choice goes to the cloud unchanged"
        assert fake.state.bodies[-1]["parallel_tool_calls"] is False
        if choice == "none":
            assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason == "stop"
        else:
            expected = "print_ticket" if isinstance(choice, dict) else "show_map"
            assert r.choices[0].message.tool_calls[0].function.name == expected


def test_a_tool_result_goes_back_as_a_follow_up(gw, fake):
    client = gw.openai()
    first = client.chat.completions.create(model="edgecloud-auto", messages=ASK, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    follow_up = [*ASK, first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "Map shown: gate B12, level 2"}]
    raw = client.chat.completions.with_raw_response.create(model="edgecloud-auto", messages=follow_up, tools=TOOLS)
    answer = raw.parse()
    assert answer.choices[0].message.content == "Done: Map shown: gate B12, level 2"
    assert raw.headers["x-edgecloud-route"] == "cloud"
    sent = fake.state.bodies[-1]["messages"]
    assert sent[1]["tool_calls"][0]["id"] == call.id and sent[1]["content"] is None
    assert sent[2] == {"role": "tool", "content": "Map shown: gate B12, level 2", "tool_call_id": call.id}


def test_tool_calls_are_never_cached(gw, fake):
    client = gw.openai()
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(model="edgecloud-auto", messages=ASK, tools=TOOLS,
                                                               temperature=0)
        assert raw.headers["x-edgecloud-route"] == "cloud"
        assert raw.parse().choices[0].message.tool_calls
    assert fake.state.chat_attempts == 2


def test_a_stream_cut_inside_a_call_ends_with_an_error(gw, fake):
    fake.set_fault("cut", cut_after=2)
    client = gw.openai()
    with pytest.raises(openai.APIError), client.chat.completions.stream(
            model="edgecloud-auto", messages=ASK, tools=TOOLS) as stream:
        for _ in stream:
            pass
    r = httpx.post(gw.base_url + "/v1/chat/completions", timeout=60, json={"messages": ASK, "tools": TOOLS,
                                                                          "stream": True})
    data = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert json.loads(data[-2])["error"]["code"] in ("cloud_connect_error", "cloud_bad_response")
    assert not any('"finish_reason":"tool_calls"' in d for d in data), "no finish that makes the call look complete"


def test_forced_edge_refuses_tools_it_cannot_call(gw, fake):
    client = gw.openai()
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="edgecloud-edge", messages=ASK, tools=TOOLS)
    err = info.value.body
    assert err["param"] == "tools" and err["code"] == "unsupported_parameter"
    assert "template-without-tools" in err["message"]


@pytest.mark.parametrize(("body", "param"), [
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice.function.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"messages": [*ASK, {"role": "tool", "content": "x"}]}, "messages[1].tool_call_id"),
])
def test_bad_tool_fields_are_400s_naming_them(gw, fake, body, param):
    r = httpx.post(gw.base_url + "/v1/chat/completions", timeout=30, json={"messages": ASK, **body})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == param


def test_no_cloud_means_a_400_naming_the_field(edge_gateway):
    r = httpx.post(edge_gateway.base_url + "/v1/chat/completions", timeout=30,
                   json={"messages": ASK, "tools": TOOLS})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "tools"
