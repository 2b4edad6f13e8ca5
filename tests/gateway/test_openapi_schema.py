"""The published OpenAPI schema of /v1/chat/completions says what the validator accepts.

Every case changes one field of a valid body; the served schema (``app.openapi()``) and
``parse_chat_request`` must agree on it. The few rules JSON Schema cannot state (they depend on
the configuration or on more than one field) are listed apart, each with the field it names.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema_rs
import pytest

from edge.app import create_app
from edge.config import Settings
from edge.errors import APIError
from edge.schemas import PART_TYPES, ROLES, parse_chat_request

SETTINGS = Settings()
BASE: dict[str, Any] = {"model": "edgecloud-auto", "messages": [{"role": "user", "content": "Where is gate B12?"}]}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    doc = create_app(SETTINGS).openapi()
    return doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]


def _with(**fields: Any) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    body.update(fields)
    return body


def _message(role: str = "user", content: Any = "Where is gate B12?") -> dict[str, Any]:
    return {"role": role, "content": content}


def _parses(body: Any) -> bool:
    try:
        parse_chat_request(body, SETTINGS, {})
    except APIError:
        return False
    return True


CASES: dict[str, Any] = {
    "base": BASE,
    **{f"role {r}": _with(messages=[_message("system", "You are a kiosk."), _message(r, "hi")])
       for r in sorted(ROLES - {"tool"})},
    "role tool": _with(messages=[_message("system", "You are a kiosk."),
                                 {"role": "tool", "content": "hi", "tool_call_id": "call_1"}]),
    "role unknown": _with(messages=[_message("robot")]),
    "role missing": _with(messages=[{"content": "hi"}]),
    **{f"part {t}": _with(messages=[_message(content=[{"type": "text", "text": "Where?"}, {"type": t}])])
       for t in sorted(PART_TYPES - {"text"})},
    "part text": _with(messages=[_message(content=[{"type": "text", "text": "Where?"}])]),
    "part unknown": _with(messages=[_message(content=[{"type": "video"}])]),
    "part without type": _with(messages=[_message(content=[{"text": "Where?"}])]),
    "part text not a string": _with(messages=[_message(content=[{"type": "text", "text": 5}])]),
    "content number": _with(messages=[_message(content=5)]),
    "content null beside text": _with(messages=[_message("system", "You are a kiosk."), _message("user", None)]),
    "messages empty": _with(messages=[]),
    "messages not a list": _with(messages="hi"),
    "messages missing": {"model": "edgecloud-auto"},
    "model not a string": _with(model=5),
    "max_tokens 1": _with(max_tokens=1),
    "max_tokens 0": _with(max_tokens=0),
    "max_tokens float": _with(max_tokens=1.5),
    "max_tokens bool": _with(max_tokens=True),
    "max_completion_tokens 0": _with(max_completion_tokens=0),
    "temperature 2": _with(temperature=2),
    "temperature 2.5": _with(temperature=2.5),
    "temperature string": _with(temperature="hot"),
    "temperature bool": _with(temperature=True),
    "top_p 1": _with(top_p=1),
    "top_p -0.1": _with(top_p=-0.1),
    "stop string": _with(stop="\n"),
    "stop four": _with(stop=["a", "b", "c", "d"]),
    "stop five": _with(stop=["a", "b", "c", "d", "e"]),
    "stop number": _with(stop=5),
    "stop list of numbers": _with(stop=[5]),
    "seed": _with(seed=7),
    "seed float": _with(seed=1.5),
    "n 1": _with(n=1),
    "n 2": _with(n=2),
    "stream": _with(stream=True),
    "stream string": _with(stream="yes"),
    "stream_options": _with(stream=True, stream_options={"include_usage": True}),
    "stream_options not an object": _with(stream_options="yes"),
    "include_usage not a bool": _with(stream_options={"include_usage": "yes"}),
    "user": _with(user="kiosk-7"),
    "user number": _with(user=7),
}

# Rules the schema cannot state, each a refusal of a body the schema allows: (case, param named).
BEYOND_THE_SCHEMA = {
    "max_tokens over the configured limit": (_with(max_tokens=SETTINGS.edge.max_tokens_limit + 1), "max_tokens"),
    "no text in any message": (_with(messages=[_message("user", "   ")]), "messages"),
    "a model name not configured": (_with(model="gpt-nonexistent"), "model"),
    "a tool message without its call id": (_with(messages=[_message("tool", "hi")]), "messages[0].tool_call_id"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_schema_and_validator_agree(schema: dict[str, Any], name: str) -> None:
    body = CASES[name]
    assert jsonschema_rs.is_valid(schema, body) == _parses(body), name


@pytest.mark.parametrize("name", list(BEYOND_THE_SCHEMA))
def test_rules_beyond_the_schema_name_their_field(schema: dict[str, Any], name: str) -> None:
    body, param = BEYOND_THE_SCHEMA[name]
    assert jsonschema_rs.is_valid(schema, body)
    with pytest.raises(APIError) as info:
        parse_chat_request(body, SETTINGS, {})
    assert info.value.param == param or (param == "model" and info.value.status == 404)


def test_the_enums_are_the_validators_sets(schema: dict[str, Any]) -> None:
    message = schema["properties"]["messages"]["items"]
    assert set(message["properties"]["role"]["enum"]) == ROLES
    part = message["properties"]["content"]["anyOf"][1]["items"]
    assert set(part["properties"]["type"]["enum"]) == PART_TYPES
