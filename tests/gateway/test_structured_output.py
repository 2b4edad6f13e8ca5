"""Structured output through the real gateway: on the device under a grammar, or to the cloud with a reason.

The on-device answers come from the embedded model sampling under llama.cpp's JSON-schema grammar;
they are checked with ``jsonschema`` (a validator the gateway does not use) and with the official
SDK's ``parse``, which is what a kiosk app built on ``with_structured_output`` relies on.
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel

from harness import make_settings, run_gateway

SIMPLE = "Where is the nearest restroom?"
# The model decodes under a grammar on a CPU that other work may share: allow minutes, not seconds.
pytestmark = pytest.mark.timeout(900)
FAST = {"connect_timeout_s": 1.0, "ttft_timeout_s": 5.0, "max_gap_s": 5.0, "total_timeout_s": 20.0,
        "max_retries": 0, "keep_warm_interval_s": 600.0, "breaker_consecutive_failures": 10_000,
        "breaker_min_calls": 10_000}
UNSUPPORTED = {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0},
                                               "kind": {"oneOf": [{"const": "a"}, {"const": "b"}]}},
               "required": ["age", "kind"]}


class Directions(BaseModel):
    place: str
    floor: int
    accessible: bool


@pytest.fixture(scope="module")
def gw(tmp_path_factory, cloud, embedded_model):
    settings = make_settings(
        tmp_path_factory.mktemp("structured"),
        cloud={"providers": [{"name": "fake", "base_url": cloud.base_url, "model": "fake-gpt", **FAST}]},
        cache={"enabled": False},
        # The edge answers every simple request in these tests, however busy the shared CPU is.
        router={"scenario": "batch"},
    )
    with run_gateway(settings) as handle:
        yield handle


def test_parse_with_a_pydantic_model_is_answered_on_the_edge(gw, fake):
    client = gw.openai(timeout=600)
    raw = client.chat.completions.with_raw_response.parse(
        model="edgecloud-auto", messages=[{"role": "user", "content": SIMPLE}], response_format=Directions,
        max_tokens=300, temperature=0,
    )
    assert raw.headers["x-edgecloud-route"] == "edge", raw.headers["x-edgecloud-reason"]
    completion = raw.parse()
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Directions)
    jsonschema.validate(json.loads(completion.choices[0].message.content), Directions.model_json_schema())
    assert fake.state.chat_attempts == 0


def test_route_explains_the_grammar_case(gw, fake):
    schema = {"type": "object", "properties": {"gate": {"type": "string"}}, "required": ["gate"]}
    body = {"messages": [{"role": "user", "content": SIMPLE}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "gate", "schema": schema}}}
    out = httpx.post(gw.base_url + "/v1/route", json=body, timeout=30).json()
    assert out["route"] == "edge"
    assert "response-format:edge-grammar:json_schema" in out["rules"]


def test_json_object_on_the_edge_parses_and_streams(gw, fake):
    client = gw.openai(timeout=600)
    stream = client.chat.completions.create(
        model="edgecloud-edge", messages=[{"role": "user", "content": "Describe the lounge as JSON."}],
        response_format={"type": "json_object"}, max_tokens=400, temperature=0, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert isinstance(json.loads(text), dict)


def test_unsupported_schema_goes_to_the_cloud_unchanged_with_a_reason(gw, fake):
    fmt = {"type": "json_schema", "json_schema": {"name": "visitor", "schema": UNSUPPORTED, "strict": False}}
    client = gw.openai(timeout=600)
    raw = client.chat.completions.with_raw_response.create(
        model="edgecloud-auto", messages=[{"role": "user", "content": SIMPLE}], response_format=fmt)
    assert raw.headers["x-edgecloud-route"] == "cloud"
    assert raw.headers["x-edgecloud-reason"] == "response-format:unsupported:minimum,oneOf"
    assert fake.state.bodies[-1]["response_format"] == fmt
    jsonschema.validate(json.loads(raw.parse().choices[0].message.content), UNSUPPORTED)


def test_forced_edge_with_an_unsupported_schema_is_a_400_naming_the_field(gw, fake):
    fmt = {"type": "json_schema", "json_schema": {"name": "visitor", "schema": UNSUPPORTED}}
    with pytest.raises(openai.BadRequestError) as info:
        gw.openai(timeout=600).chat.completions.create(
            model="edgecloud-edge", messages=[{"role": "user", "content": SIMPLE}], response_format=fmt)
    assert info.value.body["param"] == "response_format"
    assert "minimum" in info.value.body["message"] and "oneOf" in info.value.body["message"]


def test_no_cloud_and_an_unsupported_schema_is_a_400(edge_gateway):
    fmt = {"type": "json_schema", "json_schema": {"name": "visitor", "schema": UNSUPPORTED}}
    r = httpx.post(edge_gateway.base_url + "/v1/chat/completions", timeout=30,
                   json={"messages": [{"role": "user", "content": SIMPLE}], "response_format": fmt})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "response_format"


@pytest.mark.parametrize(("fmt", "param"), [
    ("json", "response_format"),
    ({"type": "xml"}, "response_format.type"),
    ({"type": "json_schema"}, "response_format.json_schema.name"),
    ({"type": "json_schema", "json_schema": {"name": "a b"}}, "response_format.json_schema.name"),
    ({"type": "json_schema", "json_schema": {"name": "ok", "schema": []}}, "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "ok", "strict": "yes"}}, "response_format.json_schema.strict"),
])
def test_bad_response_format_is_a_400_naming_the_field(edge_gateway, fmt, param):
    r = httpx.post(edge_gateway.base_url + "/v1/chat/completions", timeout=30,
                   json={"messages": [{"role": "user", "content": SIMPLE}], "response_format": fmt})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == param
