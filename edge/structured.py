"""Structured output: ``response_format`` checked, turned into a GBNF grammar, and the answer validated.

Why a grammar: the on-device model is small, and asked for JSON it writes almost-JSON. Sampling
under llama.cpp's grammar (built from the JSON schema by llama-cpp-python's port of llama.cpp's
``json_schema_to_grammar``) makes every token keep the output inside the schema, so the answer
parses by construction. The converter enforces only part of JSON Schema, so a schema is first
checked against the keywords it does enforce: anything else (``minimum``, ``oneOf``, ``format:
email`` ...) is named, and the router sends the request to the cloud with those names as the reason
instead of answering something that might not validate. The answer is validated again at the end
(``validate``) against the same subset, so a converter gap shows up as an error, never as a
silently wrong form.

Two changes are made to the grammar, never to the caller's schema: strings, arrays and free-form
objects get an upper bound when the schema sets none (a small model can otherwise write one string
until ``max_tokens`` runs out, which cuts the JSON), and the converter's string character rule,
which lets raw control characters into strings (not valid JSON), is replaced by a strict one.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import invalid

# Keywords that change nothing about what is valid.
_ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions",
})
# Keywords the grammar enforces (with the checks in ``_check`` on how they combine).
_ENFORCED = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
    "maxItems", "enum", "const", "anyOf", "$ref", "minLength", "maxLength", "pattern", "format",
})
_TYPES = frozenset({"string", "number", "integer", "boolean", "null", "object", "array"})
_FORMATS = frozenset({"date", "time", "date-time", "uuid"})
# Bounds the grammar adds where the schema has none (the schema itself is not changed).
STRING_CAP = 64
ARRAY_CAP = 8
# Lengths and counts the grammar spells out one nested rule per step: larger ones go to the cloud,
# and so does a schema over MAX_SCHEMA_BYTES (it is converted on the event loop, and every rule
# costs sampling time on the device).
MAX_COUNT = 128
MAX_SCHEMA_BYTES = 16 * 1024
# The converter's ``char`` rule is ``[^"\\]``: raw newlines and tabs inside strings, which no JSON
# parser accepts. This one is JSON's own (RFC 8259 section 7).
_CHAR_RULE = r'char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'
_JSON_OBJECT_GBNF = r"""root ::= "{" space ( member ( "," space member ){0,15} )? "}" space
member ::= string ":" space value
value ::= object | array | string | number | ("true" | "false" | "null") space
object ::= "{" space ( member ( "," space member ){0,7} )? "}" space
array ::= "[" space ( value ( "," space value ){0,7} )? "]" space
string ::= "\"" char{0,64} "\"" space
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
number ::= "-"? ([0-9] | [1-9] [0-9]{0,15}) ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})? space
space ::= " "?
"""


@dataclass
class OutputSpec:
    """What a request's ``response_format`` asks for, and whether the edge can honour it."""

    kind: str  # "text" | "json_object" | "json_schema"
    name: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool = False
    unsupported: list[str] = field(default_factory=list)  # schema features the grammar cannot enforce
    grammar: str | None = None

    @property
    def edge_ok(self) -> bool:
        return self.kind == "text" or (not self.unsupported and self.grammar is not None)


def parse_response_format(value: Any, param: str = "response_format") -> OutputSpec:
    """Validate OpenAI's ``response_format`` (or the Responses API's ``text.format``); raise 400 naming
    the field. ``param`` is where it sits in the caller's body."""
    if not isinstance(value, dict):
        raise invalid(f"'{param}' must be an object.", param, "invalid_type")
    kind = value.get("type")
    if kind == "text":
        return OutputSpec("text")
    if kind == "json_object":
        return OutputSpec("json_object", grammar=_JSON_OBJECT_GBNF)
    if kind != "json_schema":
        raise invalid(f"'{param}.type' must be 'text', 'json_object' or 'json_schema', got {kind!r}.",
                      f"{param}.type")
    # Chat completions nest the schema under ``json_schema``; the Responses API puts it beside ``type``.
    spec = value.get("json_schema", value) if param == "response_format" else value
    where = f"{param}.json_schema" if param == "response_format" else param
    if not isinstance(spec, dict):
        raise invalid(f"'{where}' must be an object.", where, "invalid_type")
    name = spec.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
        raise invalid(f"'{where}.name' must be 1-64 letters, digits, '_' or '-'.", f"{where}.name")
    schema = spec.get("schema", {})
    if not isinstance(schema, dict):
        raise invalid(f"'{where}.schema' must be a JSON Schema object.", f"{where}.schema", "invalid_type")
    strict = spec.get("strict", False)
    if strict is not None and not isinstance(strict, bool):
        raise invalid(f"'{where}.strict' must be a boolean.", f"{where}.strict", "invalid_type")
    out = OutputSpec("json_schema", name=name, schema=schema, strict=bool(strict))
    out.unsupported = unsupported_features(schema)
    if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
        out.unsupported.append(f"schema over {MAX_SCHEMA_BYTES} bytes")
    if not out.unsupported:
        try:
            out.grammar = schema_grammar(schema)
        except Exception as exc:  # the converter asserts on shapes it cannot read
            out.unsupported = [f"schema not convertible ({type(exc).__name__})"]
    return out


def unsupported_features(schema: Any) -> list[str]:
    """The JSON Schema features in ``schema`` that the grammar would not enforce, sorted, unique."""
    found: set[str] = set()
    try:
        _check(schema, schema, found, 0)
    except (TypeError, ValueError, AttributeError, RecursionError):  # shapes no schema has (a dict as a type)
        return ["malformed schema"]
    return sorted(found)


def _check(node: Any, root: dict[str, Any], found: set[str], depth: int) -> None:
    if depth > 32:
        found.add("nesting deeper than 32")
        return
    if isinstance(node, bool):
        if node is False:
            found.add("false schema")
        return
    if not isinstance(node, dict):
        found.add("non-object schema")
        return
    for key in node:
        if key not in _ENFORCED and key not in _ANNOTATIONS:
            found.add(key)
    kind = node.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    for k in kinds:
        if k not in _TYPES:
            found.add(f"type:{k}")
    if isinstance(kind, list) and len(node.keys() - _ANNOTATIONS - {"type"}) > 0:
        found.add("type list with other keywords")
    exclusive = {"anyOf", "$ref", "enum", "const"} & node.keys()
    if len(exclusive) > 1 or ((node.keys() & {"anyOf", "$ref"}) and node.keys() - _ANNOTATIONS - exclusive):
        found.add(f"{sorted(exclusive)[0]} with other keywords")
    strings = [k for k in ("pattern", "format") if k in node]
    if len(strings) > 1 or (strings and node.keys() & {"minLength", "maxLength"}):
        found.add(f"{strings[0]} with other string keywords")
    if "minLength" in node or "maxLength" in node:
        if kind != "string":
            found.add("minLength/maxLength without type string")
        if not _count_ok(node.get("minLength", 0)) or not _count_ok(node.get("maxLength", 0)):
            found.add(f"minLength/maxLength not a count up to {MAX_COUNT}")
    if not _count_ok(node.get("minItems", 0)) or not _count_ok(node.get("maxItems", 0)):
        found.add(f"minItems/maxItems not a count up to {MAX_COUNT}")
    fmt = node.get("format")
    if fmt is not None and fmt not in _FORMATS:
        found.add(f"format:{fmt}")
    pattern = node.get("pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or not (pattern.startswith("^") and pattern.endswith("$")):
            found.add("pattern not anchored with ^...$")
        elif re.search(r"\(\?|\\[dDwWsSbB]|[*+?}]\?", pattern):
            found.add("pattern with lookaround, classes or lazy quantifiers")
        elif any(int(n) > MAX_COUNT for n in re.findall(r"\{(\d+)", pattern) + re.findall(r",(\d+)\}", pattern)):
            found.add(f"pattern repetition over {MAX_COUNT}")
    ref = node.get("$ref")
    if ref is not None and (not isinstance(ref, str) or not ref.startswith("#/") or _resolve(root, ref) is None):
        found.add(f"$ref:{ref}")
    if "enum" in node and (not isinstance(node["enum"], list) or not node["enum"]):
        found.add("empty enum")
    if "items" in node and "prefixItems" in node:
        found.add("items with prefixItems")
    if isinstance(node.get("items"), list):
        found.add("items as a list")
    required = node.get("required", [])
    props = node.get("properties", {})
    if not isinstance(required, list) or not isinstance(props, dict):
        found.add("malformed properties/required")
        return
    if kind not in (None, "object") and (props or required):
        found.add("properties without type object")
    for name in required:
        if name not in props:
            found.add("required property without a schema")
    for sub in props.values():
        _check(sub, root, found, depth + 1)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        _check(extra, root, found, depth + 1)
    if isinstance(node.get("items"), dict):
        _check(node["items"], root, found, depth + 1)
    for key in ("prefixItems", "anyOf"):
        if key in node:
            if not isinstance(node[key], list) or not node[key]:
                found.add(f"empty {key}")
                continue
            for sub in node[key]:
                _check(sub, root, found, depth + 1)
    for key in ("$defs", "definitions"):
        for sub in (node.get(key) or {}).values() if isinstance(node.get(key), dict) else ():
            _check(sub, root, found, depth + 1)


def _count_ok(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def _resolve(root: dict[str, Any], ref: str) -> Any:
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _bounded(node: Any, depth: int = 0) -> Any:
    """A copy of ``node`` with caps where the schema leaves strings, arrays or objects unbounded."""
    if not isinstance(node, dict) or depth > 40:
        return node
    out = {k: v for k, v in node.items()}
    for key in ("properties", "$defs", "definitions"):
        if isinstance(out.get(key), dict):
            out[key] = {k: _bounded(v, depth + 1) for k, v in out[key].items()}
    for key in ("anyOf", "prefixItems"):
        if isinstance(out.get(key), list):
            out[key] = [_bounded(v, depth + 1) for v in out[key]]
    if isinstance(out.get("items"), dict):
        out["items"] = _bounded(out["items"], depth + 1)
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _bounded(out["additionalProperties"], depth + 1)
    kind = out.get("type")
    if kind == "string" and not ({"enum", "const", "pattern", "format", "maxLength"} & out.keys()):
        out["maxLength"] = max(STRING_CAP, out.get("minLength", 0))
    if kind == "array" and "items" in out and "maxItems" not in out:
        out["maxItems"] = max(ARRAY_CAP, out.get("minItems", 0))
    if isinstance(kind, list):  # the converter drops sibling keywords of a type list: spell it out
        out = {"anyOf": [_bounded({"type": t}, depth + 1) for t in kind]}
    return out


def schema_grammar(schema: dict[str, Any]) -> str:
    """GBNF for ``schema`` (already checked by ``unsupported_features``), with the bounds above."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    grammar = json_schema_to_gbnf(json.dumps(_bounded(copy.deepcopy(schema))))
    lines = [(_CHAR_RULE if line.startswith("char ::= ") else line) for line in grammar.splitlines()]
    return "\n".join(lines) + "\n"


def schema_hint(spec: OutputSpec) -> str:
    """The system-prompt line that tells the model what the grammar will hold it to: a small model
    fills the right fields far more often when it has read their names and descriptions."""
    if spec.kind == "json_object":
        return "Answer with one JSON object."
    return f"Answer with one JSON object that follows this JSON schema: {json.dumps(spec.schema, ensure_ascii=False)}"


# ----------------------------------------------------------------------------- validation
_FORMAT_RES = {
    "date": re.compile(r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"),
    "time": re.compile(r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{3})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)"),
    "uuid": re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"),
}
_FORMAT_RES["date-time"] = re.compile(_FORMAT_RES["date"].pattern + "T" + _FORMAT_RES["time"].pattern)


def validate(instance: Any, schema: Any, root: Any = None, path: str = "$") -> list[str]:
    """Errors of ``instance`` against ``schema`` for the subset ``unsupported_features`` accepts
    (an empty list: valid). Own-written and small: the gateway checks its own grammar's output."""
    root = schema if root is None else root
    if schema is True or schema == {}:
        return []
    if schema is False or not isinstance(schema, dict):
        return [f"{path}: no value is allowed here"]
    if "$ref" in schema:
        return validate(instance, _resolve(root, schema["$ref"]), root, path)
    if "anyOf" in schema:
        if any(not validate(instance, sub, root, path) for sub in schema["anyOf"]):
            return []
        return [f"{path}: matches none of anyOf"]
    if "const" in schema and not _same(instance, schema["const"]):
        return [f"{path}: must be {json.dumps(schema['const'])}"]
    if "enum" in schema and not any(_same(instance, v) for v in schema["enum"]):
        return [f"{path}: must be one of {json.dumps(schema['enum'])}"]
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_is_type(instance, k) for k in kinds):
            return [f"{path}: must be of type {kind}"]
    errors: list[str] = []
    if isinstance(instance, str):
        if len(instance) < schema.get("minLength", 0):
            errors.append(f"{path}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(instance) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']}")
        if "pattern" in schema and re.search(schema["pattern"], instance) is None:
            errors.append(f"{path}: does not match {schema['pattern']}")
        fmt = _FORMAT_RES.get(schema.get("format", ""))
        if fmt is not None and fmt.fullmatch(instance) is None:
            errors.append(f"{path}: not a {schema['format']}")
    if isinstance(instance, list):
        if len(instance) < schema.get("minItems", 0):
            errors.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(instance) > schema["maxItems"]:
            errors.append(f"{path}: more than {schema['maxItems']} items")
        prefix = schema.get("prefixItems") or []
        for i, item in enumerate(instance):
            sub = prefix[i] if i < len(prefix) else schema.get("items", True)
            errors += validate(item, sub, root, f"{path}[{i}]")
    if isinstance(instance, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in instance:
                errors.append(f"{path}: '{name}' is required")
        extra = schema.get("additionalProperties", True)
        for name, value in instance.items():
            if name in props:
                errors += validate(value, props[name], root, f"{path}.{name}")
            elif extra is False:
                errors.append(f"{path}: '{name}' is not allowed")
            elif isinstance(extra, dict):
                errors += validate(value, extra, root, f"{path}.{name}")
    return errors


def _is_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and math.isfinite(value) and value.is_integer())
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    return type(value) is {"string": str, "null": type(None), "object": dict, "array": list}.get(kind)


def _same(a: Any, b: Any) -> bool:
    """JSON equality (``1 == True`` in Python is not in JSON)."""
    return (type(a) is type(b) and a == b) or (
        isinstance(a, (int, float)) and isinstance(b, (int, float))
        and not isinstance(a, bool) and not isinstance(b, bool) and a == b)


def check_answer(text: str, spec: OutputSpec) -> list[str]:
    """Errors of a finished answer against the request's ``response_format`` (empty: it is good)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return [f"not JSON: {exc}"]
    if spec.kind == "json_object":
        return [] if isinstance(value, dict) else ["not a JSON object"]
    return validate(value, spec.schema or {})
