"""Tools (function calling): the request's ``tools``/``tool_choice`` checked, and tool calls on the device.

The cloud gets tools exactly as the kiosk sent them and its ``tool_calls`` come back piece by
piece (``cloud_bridge``). The device can answer a tool request only when its GGUF's chat template
knows tools (it renders the offered tools into the prompt in the format the model was trained on)
and in a call format the gateway can hold the model to:

- ``hermes``: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` (Qwen2.5, Hermes);
- ``llama3``: ``{"name": ..., "parameters": {...}}`` (Llama 3.1/3.2 JSON tool calling).

The model then samples under a grammar over the offered tools' names and parameter schemas
(``edge/structured.py`` turns each schema into GBNF), so a call always names an offered tool and
its arguments always parse and validate. ``edge_blocker`` says why a request cannot be answered on
the device; the router records that as its reason.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from .errors import invalid
from .structured import MAX_SCHEMA_BYTES, schema_grammar, unsupported_features, validate
from .types import ChatRequest, ToolCallDelta

FORMATS = ("hermes", "llama3")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_TOOLS = 128
MAX_PARALLEL = 4  # calls in one on-device answer
_MARKERS = ("<|", "|>", "<tool_call>", "</tool_call>", "<s>", "</s>", "[INST]")
_EMPTY_PARAMS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def parse_tools(body: dict[str, Any], req: ChatRequest) -> None:
    """Validate ``tools``, ``tool_choice`` and ``parallel_tool_calls`` onto ``req``; 400 naming the field."""
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise invalid("'tools' must be a list.", "tools", "invalid_type")
        if len(tools) > MAX_TOOLS:
            raise invalid(f"'tools' holds {len(tools)} tools; at most {MAX_TOOLS} are allowed.", "tools")
        names: set[str] = set()
        for i, tool in enumerate(tools):
            at = f"tools[{i}]"
            if not isinstance(tool, dict):
                raise invalid(f"'{at}' must be an object.", at, "invalid_type")
            if tool.get("type") != "function":
                raise invalid(f"'{at}.type' must be 'function', got {tool.get('type')!r}.", f"{at}.type")
            function = tool.get("function")
            if not isinstance(function, dict):
                raise invalid(f"'{at}.function' must be an object.", f"{at}.function", "invalid_type")
            name = function.get("name")
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise invalid(f"'{at}.function.name' must be 1-64 letters, digits, '_' or '-'.",
                              f"{at}.function.name")
            if name in names:
                raise invalid(f"'{at}.function.name' repeats the tool name {name!r}.", f"{at}.function.name")
            names.add(name)
            params = function.get("parameters")
            if params is not None and not isinstance(params, dict):
                raise invalid(f"'{at}.function.parameters' must be a JSON Schema object.",
                              f"{at}.function.parameters", "invalid_type")
            if "description" in function and not isinstance(function["description"], str):
                raise invalid(f"'{at}.function.description' must be a string.", f"{at}.function.description",
                              "invalid_type")
        req.tools = list(tools)
    choice = body.get("tool_choice")
    if choice is not None:
        if isinstance(choice, str):
            if choice not in ("none", "auto", "required"):
                raise invalid(f"'tool_choice' must be 'none', 'auto', 'required' or a named function, got {choice!r}.",
                              "tool_choice")
            if choice == "required" and not req.tools:
                raise invalid("'tool_choice' is 'required' but no 'tools' were given.", "tool_choice")
        elif isinstance(choice, dict):
            fn = choice.get("function")
            name = fn.get("name") if isinstance(fn, dict) else None
            if choice.get("type") != "function" or not isinstance(name, str):
                raise invalid("'tool_choice' must name a function: {\"type\": \"function\", \"function\": "
                              "{\"name\": ...}}.", "tool_choice")
            if name not in {t["function"]["name"] for t in req.tools}:
                raise invalid(f"'tool_choice' names {name!r}, which is not in 'tools'.", "tool_choice.function.name")
        else:
            raise invalid("'tool_choice' must be a string or an object.", "tool_choice", "invalid_type")
        req.tool_choice = choice
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise invalid("'parallel_tool_calls' must be a boolean.", "parallel_tool_calls", "invalid_type")


def tool_format(template: str) -> str | None:
    """The call format a chat template was written for, None when it renders no tools."""
    if "tools" not in template:
        return None
    if "<tool_call>" in template:
        return "hermes"
    if "<|python_tag|>" in template or "ipython" in template:
        return "llama3"
    return None


def edge_tools_state(edge: Any) -> str:
    """What the loaded edge model can do with tools: a format of ``FORMATS``, ``off`` (the
    operator's ``[edge] tools_on_device = false``), ``template-without-tools`` or ``not-loaded``."""
    if not getattr(getattr(edge, "config", None), "tools_on_device", True):
        return "off"
    model = getattr(edge, "model", None)
    if model is None:
        return "not-loaded"
    template = getattr(model.formatter, "template", None) or ""
    return tool_format(template) or "template-without-tools"


def has_tool_turns(req: ChatRequest) -> bool:
    return any(m.role in ("tool", "function") or m.tool_calls for m in req.messages)


def wants_call(req: ChatRequest) -> bool:
    """The request offers tools the model may call (``tool_choice`` other than ``none``)."""
    return bool(req.tools) and req.tool_choice != "none"


def edge_blocker(req: ChatRequest, edge_tools: str) -> str | None:
    """Why the device cannot honour this request's tools, as a router reason; None if it can."""
    if not req.has_tools:
        return None
    if "functions" in req.extra.get("passthrough", {}) or "function_call" in req.extra.get("passthrough", {}):
        return "tools:legacy-functions"
    if has_tool_turns(req):
        return "tools:tool-turns"
    if not wants_call(req):
        return None  # tool_choice "none": a plain text answer
    if edge_tools not in FORMATS:
        return f"tools:{edge_tools}"
    if any(mark in json.dumps(req.tools, ensure_ascii=False) for mark in _MARKERS):
        # The template renders tools as its own text (special tokens parsed): marker text there
        # could open turns of its own, so such tools are the cloud's.
        return "tools:marker-text"
    bad = sorted({f for t in _offered(req) for f in unsupported_features(_params(t))})
    if len(json.dumps([_params(t) for t in _offered(req)])) > MAX_SCHEMA_BYTES:
        bad.append(f"parameters over {MAX_SCHEMA_BYTES} bytes")
    if bad:
        return "tools:unsupported-schema:" + ",".join(bad)
    return None


def _offered(req: ChatRequest) -> list[dict[str, Any]]:
    """The tools the model may call: all, or the one ``tool_choice`` names."""
    choice = req.tool_choice
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        return [t for t in req.tools if t["function"]["name"] == name]
    return req.tools


def _params(tool: dict[str, Any]) -> dict[str, Any]:
    return tool["function"].get("parameters") or _EMPTY_PARAMS


def tools_grammar(req: ChatRequest, fmt: str) -> str:
    """GBNF holding the model to calls of the offered tools, in the template's format.

    ``required``/a named function: one call or more (parallel calls allowed unless
    ``parallel_tool_calls`` is false); ``auto``: calls, or a text answer that does not start like one.
    """
    args_key = "arguments" if fmt == "hermes" else "parameters"
    schema = {"anyOf": [
        {"type": "object", "properties": {"name": {"const": t["function"]["name"]}, args_key: _params(t)},
         "required": ["name", args_key]}
        for t in _offered(req)
    ]}
    calls = re.sub(r"^root ::= ", "edgecloud-call ::= ", schema_grammar(schema), count=1, flags=re.M)
    parallel = req.extra.get("passthrough", {}).get("parallel_tool_calls", True) is not False
    more = f'{{0,{MAX_PARALLEL - 1}}}' if parallel and not isinstance(req.tool_choice, dict) else "{0,0}"
    if fmt == "hermes":
        block = '"<tool_call>\\n" edgecloud-call "\\n</tool_call>"'
        rules = f'edgecloud-calls ::= {block} ( "\\n" {block} ){more}\n'
        text_start = "[^<\\x00]"
    else:
        rules = f'edgecloud-calls ::= edgecloud-call ( ";" space edgecloud-call ){more}\n'
        text_start = "[^{\\x00]"
    if req.tool_choice in (None, "auto"):
        rules += f"root ::= edgecloud-calls | {text_start} [^\\x00]*\n"
    else:
        rules += "root ::= edgecloud-calls\n"
    return calls + rules


def call_opener(fmt: str) -> str:
    """How an on-device tool-call answer starts (text that starts otherwise is a plain answer)."""
    return "<tool_call>" if fmt == "hermes" else "{"


@dataclass
class ParsedCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it


def parse_calls(text: str, fmt: str, req: ChatRequest) -> list[ParsedCall]:
    """The calls in an on-device answer; ``ValueError`` when they do not parse or validate."""
    if fmt == "hermes":
        bodies = re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, flags=re.S)
    else:
        bodies = _split_json_objects(text)
    if not bodies:
        raise ValueError("no tool call in the answer")
    args_key = "arguments" if fmt == "hermes" else "parameters"
    by_name = {t["function"]["name"]: t for t in _offered(req)}
    calls = []
    for raw in bodies:
        obj = json.loads(raw)
        name = obj.get("name")
        if name not in by_name:
            raise ValueError(f"call of an unknown tool {name!r}")
        args = obj.get(args_key, {})
        errors = validate(args, _params(by_name[name]))
        if errors:
            raise ValueError(f"arguments of {name} do not validate: {errors[0]}")
        calls.append(ParsedCall(name, json.dumps(args, ensure_ascii=False)))
    return calls


def _split_json_objects(text: str) -> list[str]:
    decoder = json.JSONDecoder()
    out, i = [], 0
    while i < len(text):
        while i < len(text) and text[i] in " ;\n":
            i += 1
        if i >= len(text):
            break
        _, end = decoder.raw_decode(text, i)
        out.append(text[i:end])
        i = end
    return out


def call_deltas(calls: list[ParsedCall]) -> list[ToolCallDelta]:
    """Whole calls as stream pieces: one piece per call carrying its id, name and all arguments."""
    return [ToolCallDelta(i, f"call_{uuid.uuid4().hex[:24]}", c.name, c.arguments) for i, c in enumerate(calls)]
