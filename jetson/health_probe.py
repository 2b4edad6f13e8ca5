"""Wait for the gateway's /readyz, then time one streamed chat completion on the on-device model.

Why stdlib only: it runs right after installation from jetson/setup.sh, in the gateway's venv
but before anyone has checked that venv, and on the Jetson's Python 3.10. ``http.client``
reads the SSE stream line by line, which is all a timing probe needs.

Output is ``key=value`` lines for setup.sh's health report. Figures:
- ``ttft_s``: request sent -> first content delta received (includes prompt prefill);
- ``tokens_per_s``: completion tokens after the first one / time from first to last delta,
  i.e. decode speed, the number that memory bandwidth bounds on an Orin.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
import urllib.parse
from dataclasses import dataclass

# The route name that forces the on-device model (edge/config.py ROUTE_NAMES).
EDGE_MODEL = "edgecloud-edge"
PROMPT = "In one sentence, what can a self-service kiosk help a visitor with?"


@dataclass(frozen=True)
class ProbeResult:
    """One timed streamed completion."""

    ttft_s: float
    completion_tokens: int
    decode_s: float
    text: str

    @property
    def tokens_per_s(self) -> float:
        if self.completion_tokens < 2 or self.decode_s <= 0:
            return 0.0
        return (self.completion_tokens - 1) / self.decode_s


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"only http://host:port URLs are probed, got {url!r}")
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    return conn, parts.path.rstrip("/")


def readyz_status(url: str, timeout: float = 5.0) -> int:
    """HTTP status of GET /readyz, or 0 when nothing answers."""
    conn, base = _connection(url, timeout)
    try:
        conn.request("GET", f"{base}/readyz")
        response = conn.getresponse()
        response.read()
        return response.status
    except OSError:
        return 0
    finally:
        conn.close()


def wait_ready(url: str, timeout_s: float, interval_s: float = 2.0) -> bool:
    """Poll /readyz until it answers 200 (model loaded) or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        if readyz_status(url) == 200:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def _sse_events(response: http.client.HTTPResponse):
    """Yield the JSON payload of each ``data:`` line until ``[DONE]``."""
    while True:
        raw = response.readline()
        if not raw:
            return
        line = raw.decode("utf-8", errors="replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        yield json.loads(data)


def probe(url: str, max_tokens: int = 64, timeout_s: float = 300.0) -> ProbeResult:
    """Stream one chat completion from the on-device model and time it."""
    body = json.dumps({
        "model": EDGE_MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    })
    conn, base = _connection(url, timeout_s)
    try:
        start = time.monotonic()
        conn.request("POST", f"{base}/v1/chat/completions", body=body,
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        response = conn.getresponse()
        if response.status != 200:
            detail = response.read().decode("utf-8", errors="replace")[:300]
            raise RuntimeError(f"chat completion answered HTTP {response.status}: {detail}")
        first = last = 0.0
        deltas = 0
        usage_tokens = 0
        pieces: list[str] = []
        for event in _sse_events(response):
            usage = event.get("usage") or {}
            usage_tokens = int(usage.get("completion_tokens") or usage_tokens)
            for choice in event.get("choices") or []:
                content = (choice.get("delta") or {}).get("content")
                if content:
                    now = time.monotonic()
                    first = first or now
                    last = now
                    deltas += 1
                    pieces.append(content)
    finally:
        conn.close()
    if not deltas:
        raise RuntimeError("the stream carried no content")
    return ProbeResult(
        ttft_s=first - start,
        completion_tokens=usage_tokens or deltas,
        decode_s=last - first,
        text="".join(pieces),
    )


def emit(key: str, value: object) -> None:
    print(f"{key}={value}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("wait", "probe"))
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args(argv)

    if args.command == "wait":
        ready = wait_ready(args.url, args.timeout)
        emit("ready", int(ready))
        return 0 if ready else 1
    try:
        result = probe(args.url, args.max_tokens, args.timeout)
    except (OSError, RuntimeError, ValueError) as exc:
        emit("probe_error", " ".join(str(exc).split()))
        return 1
    emit("ttft_s", f"{result.ttft_s:.3f}")
    emit("completion_tokens", result.completion_tokens)
    emit("tokens_per_s", f"{result.tokens_per_s:.1f}")
    emit("sample", json.dumps(result.text[:120]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
