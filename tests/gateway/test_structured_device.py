"""Fifty different schemas answered by the embedded model on the device: every answer parses and
validates (checked with ``jsonschema``, not with the gateway's own validator)."""

from __future__ import annotations

import itertools
import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest

FIELDS = [
    ("name", {"type": "string", "maxLength": 24}),
    ("gate", {"type": "string", "pattern": "^[A-Z][0-9]{1,2}$"}),
    ("floor", {"type": "integer"}),
    ("price", {"type": "number"}),
    ("accessible", {"type": "boolean"}),
    ("date", {"type": "string", "format": "date"}),
    ("language", {"type": "string", "enum": ["en", "fr", "de", "zh"]}),
    ("tags", {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1, "maxItems": 3}),
    ("note", {"anyOf": [{"type": "string", "maxLength": 20}, {"type": "null"}]}),
    ("place", {"$ref": "#/$defs/place"}),
    ("time", {"type": "string", "format": "time"}),
    ("seats", {"type": "array", "items": {"type": "integer"}, "maxItems": 2}),
    ("kind", {"const": "kiosk"}),
    ("id", {"type": "string", "format": "uuid"}),
]
PLACE = {"type": "object", "properties": {"terminal": {"type": "integer"}, "hall": {"type": "string", "maxLength": 10}},
         "required": ["terminal", "hall"], "additionalProperties": False}
QUESTIONS = ["Where is gate B12?", "Book a taxi for tomorrow.", "What time does the lounge open?",
             "Fill the visitor form for Ana from Lyon.", "Find a pharmacy on floor 2."]


def schemas() -> list[dict]:
    out = []
    for size in (2, 3, 4):
        for combo in itertools.combinations(range(len(FIELDS)), size):
            if len(out) == 50:
                return out
            if (sum(combo) * 7 + size) % 5:  # a spread of combinations, not the first 50 in order
                continue
            props = {FIELDS[i][0]: FIELDS[i][1] for i in combo}
            required = [name for j, name in enumerate(props) if j % 2 == 0]
            schema = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
            if "place" in props:
                schema["$defs"] = {"place": PLACE}
            out.append(schema)
    return out


SCHEMAS = schemas()


def test_there_are_fifty_different_schemas():
    assert len(SCHEMAS) == 50 and len({json.dumps(s, sort_keys=True) for s in SCHEMAS}) == 50


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~40 s on an idle 2-core machine; much longer when the CPU is shared
def test_fifty_schemas_always_parse_and_validate_on_the_device(edge_gateway):
    """Four at a time, as four kiosks would send them: each slot has its own grammar sampler."""
    client = edge_gateway.openai(timeout=900)

    def ask(i: int) -> tuple[int, str, object, str | None]:
        schema = SCHEMAS[i]
        raw = client.chat.completions.with_raw_response.create(
            model="edgecloud-edge", messages=[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
            response_format={"type": "json_schema", "json_schema": {"name": f"form_{i}", "schema": schema}},
            max_tokens=400, temperature=0.7 if i % 2 else 0.0, seed=i)
        choice = raw.parse().choices[0]
        return i, raw.headers["x-edgecloud-route"], choice, choice.message.content

    failures = []
    with ThreadPoolExecutor(max_workers=4) as pool:
        for i, route, choice, content in pool.map(ask, range(len(SCHEMAS))):
            assert route == "edge"
            try:
                assert choice.finish_reason == "stop", choice.finish_reason
                validator = jsonschema.Draft202012Validator(
                    SCHEMAS[i], format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
                validator.validate(json.loads(content))
            except (AssertionError, ValueError, jsonschema.ValidationError) as exc:
                failures.append((i, content, str(exc)[:200]))
    assert not failures, failures
