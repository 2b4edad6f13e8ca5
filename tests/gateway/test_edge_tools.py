"""Tool calls answered on the device: the embedded model under a grammar over the offered tools.

The embedded SmolLM2's chat template renders no tools, so the gateway sends tool requests to the
cloud (tested in test_tool_calls.py). Here the loaded model gets a Hermes-style template (the
format of Qwen2.5's), the case of a GGUF whose template supports tools: the real model then answers,
and every call must name an offered tool with arguments that validate against its schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import httpx
import jsonschema
import pytest

from edge.config import EdgeModelConfig
from edge.router import LiveState, Router, RouterConfig
from edge.schemas import parse_chat_request
from edge.tools import edge_tools_state, tool_format
from harness import make_settings, run_gateway

HERMES = """{%- if tools %}<|im_start|>system
{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}
{%- else %}You are a helpful kiosk assistant.{% endif %}

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if not (tools and loop.first and message.role == 'system') %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

TOOLS = [
    {"type": "function", "function": {
        "name": "show_map", "description": "Show the way to a gate on the airport map.",
        "parameters": {"type": "object", "properties": {"gate": {"type": "string", "maxLength": 8}},
                       "required": ["gate"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "print_ticket", "description": "Print the boarding pass for a booking code.",
        "parameters": {"type": "object", "properties": {"booking": {"type": "string", "pattern": "^[A-Z0-9]{6}$"},
                                                        "copies": {"type": "integer"}},
                       "required": ["booking"], "additionalProperties": False}}},
]
ASK = [{"role": "user", "content": "Show me the way to gate B12"}]
# The model decodes under a grammar on a CPU that other work may share: allow minutes, not seconds.
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def gw(tmp_path_factory, embedded_model):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    settings = make_settings(tmp_path_factory.mktemp("edge-tools"), cache={"enabled": False},
                             router={"scenario": "batch"})
    with run_gateway(settings) as handle:
        model = handle.services.edge.model
        model.formatter = Jinja2ChatFormatter(template=HERMES, eos_token="<|im_end|>", bos_token="")
        yield handle


def _check(call):
    schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == call.function.name)
    jsonschema.validate(json.loads(call.function.arguments), schema)
    assert call.id.startswith("call_") and call.type == "function"


def test_required_tool_call_on_the_device(gw):
    client = gw.openai(timeout=600)
    raw = client.chat.completions.with_raw_response.create(
        model="edgecloud-edge", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=120, temperature=0)
    r = raw.parse()
    assert raw.headers["x-edgecloud-route"] == "edge"
    assert r.choices[0].finish_reason == "tool_calls"
    assert r.choices[0].message.tool_calls
    for call in r.choices[0].message.tool_calls:
        _check(call)
    assert r.usage.completion_tokens > 0


def test_named_tool_call_streamed_on_the_device(gw):
    client = gw.openai(timeout=600)
    choice = {"type": "function", "function": {"name": "print_ticket"}}
    with client.chat.completions.stream(model="edgecloud-edge", messages=[
            {"role": "user", "content": "Print my boarding pass, booking XK42QZ"}],
            tools=TOOLS, tool_choice=choice, max_tokens=120, temperature=0) as stream:
        final = stream.get_final_completion()
    [call] = final.choices[0].message.tool_calls
    assert call.function.name == "print_ticket"
    _check(call)


def test_route_explains_the_device_tools_case(gw):
    out = httpx.post(gw.base_url + "/v1/route", timeout=30, json={"messages": ASK, "tools": TOOLS}).json()
    assert "tools:edge-grammar:hermes" in out["rules"]
    out = httpx.post(gw.base_url + "/v1/route", timeout=30, json={
        "messages": [*ASK, {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "show_map", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
        "tools": TOOLS}).json()
    assert out["reason"] == "tools:tool-turns"


def test_template_formats():
    assert tool_format(HERMES) == "hermes"
    assert tool_format("{% for m in messages %}{{ m.content }}{% endfor %}") is None
    assert tool_format("{% if tools %}<|python_tag|>{% endif %} ipython") == "llama3"


def test_operator_switch_turns_device_tools_off():
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    model = SimpleNamespace(formatter=Jinja2ChatFormatter(template=HERMES, eos_token="", bos_token=""))
    on = SimpleNamespace(config=EdgeModelConfig(), model=model)
    off = SimpleNamespace(config=EdgeModelConfig(tools_on_device=False), model=model)
    assert (edge_tools_state(on), edge_tools_state(off)) == ("hermes", "off")
    settings = make_settings(Path("/tmp"))
    req = parse_chat_request({"messages": ASK, "tools": TOOLS}, settings)
    live = LiveState(cloud_enabled=True, cloud_available=True, edge_tools="off")
    d = Router(RouterConfig()).decide(req, live, 20)
    assert (d.route, d.reason) == ("cloud", "tools:off")
    req = parse_chat_request({"messages": ASK, "tools": TOOLS}, settings)
    d = Router(RouterConfig()).decide(req, LiveState(cloud_enabled=True, cloud_available=True, edge_tools="hermes"), 20)
    assert "tools:edge-grammar:hermes" in d.rules and d.edge_ok


def test_auto_on_the_device_is_a_valid_call_or_plain_text(gw):
    client = gw.openai(timeout=600)
    r = client.chat.completions.create(model="edgecloud-edge", messages=[
        {"role": "user", "content": "Hello! Which gate is my flight to Lyon?"}], tools=TOOLS, max_tokens=60,
        temperature=0)
    choice = r.choices[0]
    if choice.finish_reason == "tool_calls":
        for call in choice.message.tool_calls:
            _check(call)
    else:
        assert choice.message.tool_calls is None and choice.message.content
        assert not choice.message.content.startswith("<tool_call>")


@pytest.mark.parametrize("fmt", ["hermes", "llama3"])
@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "function": {"name": "print_ticket"}}])
def test_every_tool_grammar_parses_in_llama_cpp(gw, fmt, choice):
    from llama_cpp import llama_cpp as lib

    from edge.tools import tools_grammar
    from edge.types import ChatRequest, Message
    from models import llama_runtime

    grammar = tools_grammar(ChatRequest(messages=[Message("user", "x")], tools=TOOLS, tool_choice=choice), fmt)
    vocab = llama_runtime.vocab(gw.services.edge.model.llama)
    sampler = lib.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    assert sampler, grammar
    lib.llama_sampler_free(sampler)
