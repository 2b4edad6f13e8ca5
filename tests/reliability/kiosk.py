"""What a kiosk sees: one chat request over raw HTTP, reduced to the facts the suite asserts on.

Raw httpx rather than the ``openai`` client here because the assertions are about the wire: the
status before any byte of a stream, the route headers, the exact order "error event, then
``data: [DONE]``". (test_fault_matrix.py also drives the official client for the same faults.)
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Seen:
    """One request's outcome as the kiosk saw it."""

    status: int
    elapsed_s: float
    stream: bool
    route: str | None = None
    reason: str | None = None
    content: str = ""
    finish_reason: str | None = None
    error: dict[str, Any] | None = None  # the OpenAI error object (body or stream event)
    error_event: bool = False  # the error came as an SSE event after a 200
    done: bool = False  # the stream ended with data: [DONE]
    events_after_done: int = 0
    raw_tail: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None and self.finish_reason is not None

    def summary(self) -> str:
        """Short cell text for the fault matrix table."""
        if self.ok:
            return f"200 {self.route} {self.elapsed_s:.1f}s"
        code = (self.error or {}).get("code") or "?"
        if self.error_event:
            return f"200+err:{code}+DONE {self.elapsed_s:.1f}s"
        return f"{self.status} {code} {self.elapsed_s:.1f}s"


def check_error_shape(error: Any) -> list[str]:
    if not isinstance(error, dict):
        return [f"error is not an object: {error!r}"]
    problems = []
    if set(error) != {"message", "type", "param", "code"}:
        problems.append(f"error keys {sorted(error)}")
    if not isinstance(error.get("message"), str) or not error.get("message"):
        problems.append("error without a message")
    if "Traceback" in json.dumps(error) or 'File "' in json.dumps(error):
        problems.append("a traceback in the error")
    return problems


def chat(
    base_url: str, question: str, *, model: str = "edgecloud-auto", stream: bool = False, max_tokens: int = 8,
    timeout_s: float = 60.0, headers: dict[str, str] | None = None, temperature: float = 0.0,
) -> Seen:
    body = {"model": model, "stream": stream, "max_tokens": max_tokens, "temperature": temperature,
            "messages": [{"role": "user", "content": question}]}
    hdrs = {"cache-control": "no-store", **(headers or {})}
    started = time.perf_counter()
    with httpx.Client(timeout=timeout_s) as client, client.stream(
        "POST", base_url + "/v1/chat/completions", json=body, headers=hdrs
    ) as r:
        seen = Seen(status=r.status_code, elapsed_s=0.0, stream=stream, route=r.headers.get("x-edgecloud-route"),
                    reason=r.headers.get("x-edgecloud-reason"))
        if r.status_code != 200 or not r.headers.get("content-type", "").startswith("text/event-stream"):
            raw = r.read().decode("utf-8", "replace")
            seen.raw_tail = raw[-300:]
            _read_json_answer(seen, raw)
        else:
            _read_sse(seen, r)
    seen.elapsed_s = time.perf_counter() - started
    if "Traceback" in seen.raw_tail:
        seen.problems.append("traceback in the response")
    return seen


def _read_json_answer(seen: Seen, raw: str) -> None:
    try:
        doc = json.loads(raw)
    except ValueError:
        seen.problems.append(f"{seen.status} body is not JSON: {raw[:200]!r}")
        return
    if seen.status == 200:
        choice = doc["choices"][0]
        seen.content = choice["message"]["content"] or ""
        seen.finish_reason = choice["finish_reason"]
        return
    seen.error = doc.get("error") if isinstance(doc, dict) else None
    seen.problems += check_error_shape(seen.error)


def _read_sse(seen: Seen, r: httpx.Response) -> None:
    tail: list[str] = []
    for line in r.iter_lines():
        if not line:
            continue
        tail = [*tail[-5:], line]
        if not line.startswith("data: "):
            seen.problems.append(f"non-data SSE line {line[:80]!r}")
            continue
        data = line[len("data: "):]
        if seen.done:
            seen.events_after_done += 1
            continue
        if data == "[DONE]":
            seen.done = True
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            seen.problems.append(f"SSE event is not JSON: {data[:80]!r}")
            continue
        if "error" in obj:
            seen.error, seen.error_event = obj["error"], True
            seen.problems += check_error_shape(obj["error"])
            continue
        if seen.error is not None:
            seen.problems.append("content after the error event")
        for choice in obj.get("choices") or []:
            seen.content += (choice.get("delta") or {}).get("content") or ""
            if choice.get("finish_reason"):
                seen.finish_reason = choice["finish_reason"]
    seen.raw_tail = "\n".join(tail)
    if not seen.done:
        seen.problems.append("the stream did not end with data: [DONE]")
    if seen.events_after_done:
        seen.problems.append("events after [DONE]")
