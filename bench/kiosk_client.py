"""One simulated kiosk: streams each answer over HTTP and times it the way a kiosk user feels it.

httpx streaming rather than the ``openai`` client: the benchmark needs the gateway's response
headers (``x-edgecloud-route``/``-reason``/``-cache``) of every stream and the first *content*
delta's arrival time, and with hundreds of concurrent streams on two cores the thinner client keeps
the benchmark's own CPU use (which would slow the gateway it measures) low. The tests drive the
gateway with the official ``openai`` client; the wire format is the same.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import httpx

from bench.kiosk_stats import RequestResult
from bench.kiosk_traffic import Session

NO_ANSWER = "(no answer)"


@dataclass(frozen=True)
class Strategy:
    """How the kiosk asks: which model name, and whether the answer cache may be used."""

    name: str
    model: str
    bypass_cache: bool
    purge_before: bool = False
    description: str = ""


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("all-cloud", "edgecloud-cloud", True, description="every request to the cloud, no cache"),
    Strategy("all-edge", "edgecloud-edge", True, description="every request to the edge model, no cache"),
    Strategy("routed", "edgecloud-auto", True, description="router + hedging, no cache"),
    Strategy("hybrid", "edgecloud-auto", False, purge_before=True,
             description="cache (purged first, FAQ pack kept) + router + hedging"),
)


@dataclass
class RequestSettings:
    max_tokens: int = 48
    temperature: float = 0.2  # <= the cache's max_cacheable_temperature, as a kiosk would set it
    timeout_s: float = 120.0


async def stream_chat(
    client: httpx.AsyncClient, strategy: Strategy, messages: list[dict[str, str]], settings: RequestSettings,
    result: RequestResult,
) -> str:
    """Send one streamed chat request; fill ``result``; return the answer text ("" on error)."""
    body = {
        "model": strategy.model, "messages": messages, "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": settings.max_tokens, "temperature": settings.temperature,
    }
    headers = {"x-edgecloud-cache": "bypass"} if strategy.bypass_cache else {}
    text: list[str] = []
    started = time.perf_counter()
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers,
                                 timeout=settings.timeout_s) as resp:
            result.status = resp.status_code
            if resp.status_code != 200:
                raw = await resp.aread()
                result.error = _error_code(raw, resp.status_code)
                result.total_s = time.perf_counter() - started
                return ""
            route = resp.headers.get("x-edgecloud-route")
            result.reason = resp.headers.get("x-edgecloud-reason")
            result.cache = resp.headers.get("x-edgecloud-cache")
            chunks = 0
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if "error" in event:
                    result.error = f"stream:{(event['error'] or {}).get('code') or 'error'}"
                    break
                for choice in event.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        if result.ttft_s is None:
                            result.ttft_s = time.perf_counter() - started
                        text.append(piece)
                        chunks += 1
                    if choice.get("finish_reason"):
                        result.finish_reason = choice["finish_reason"]
                usage = event.get("usage")
                if usage:
                    result.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                    result.completion_tokens = int(usage.get("completion_tokens") or 0)
            result.total_s = time.perf_counter() - started
            if result.error is None:
                if result.finish_reason is None:
                    result.error = "stream:unfinished"
                else:
                    result.route = route
                    if result.ttft_s is None:  # an empty answer: the first token is the end
                        result.ttft_s = result.total_s
                    if not result.completion_tokens:
                        result.completion_tokens = chunks
    except httpx.HTTPError as exc:
        result.error = f"transport:{type(exc).__name__}"
        result.total_s = time.perf_counter() - started
    return "".join(text) if result.error is None else ""


def _error_code(raw: bytes, status: int) -> str:
    try:
        err = json.loads(raw).get("error") or {}
        return f"{status}:{err.get('code') or err.get('type') or 'error'}"
    except (ValueError, AttributeError):
        return f"{status}:unparsed"


async def run_kiosk(
    client: httpx.AsyncClient, strategy: Strategy, sessions: list[Session], settings: RequestSettings,
    t0: float, stop_at: float, results: list[RequestResult],
) -> bool:
    """Play this kiosk's sessions in order; returns False if the time cap cut it short."""
    for session in sessions:
        history: list[dict[str, str]] = []
        for n, turn in enumerate(session.turns):
            await asyncio.sleep(turn.think_s)
            if time.perf_counter() >= stop_at:
                return False
            if not turn.followup:
                history = []
            messages = [*history, {"role": "user", "content": turn.text}]
            result = RequestResult(
                strategy=strategy.name, session=session.index, kiosk=session.kiosk, turn=n, kind=turn.kind,
                label=turn.label, dataset_label=turn.dataset_label, lang=turn.lang, source=turn.source,
                sent_at_s=round(time.perf_counter() - t0, 4),
            )
            answer = await stream_chat(client, strategy, messages, settings, result)
            results.append(result)
            # The follow-up carries what the kiosk really showed; a failed turn still leaves a turn
            # in the history so that every strategy sends the same number of requests.
            history = [*messages, {"role": "assistant", "content": answer or NO_ANSWER}]
    return True


async def run_strategy(
    base_url: str, strategy: Strategy, sessions: list[Session], concurrency: int, settings: RequestSettings,
    cap_s: float,
) -> tuple[list[RequestResult], float, bool]:
    """All kiosks at once; returns (results, wall seconds, complete).

    Every kiosk has its own client and connection, as real kiosks do; one pool shared by 64 streams
    would also serialise on httpx's pool bookkeeping (encode/httpx#3215) and add the benchmark's own
    delay to every TTFT.
    """
    per_kiosk: dict[int, list[Session]] = {}
    for session in sessions:
        per_kiosk.setdefault(session.kiosk, []).append(session)
    results: list[RequestResult] = []

    async def kiosk(mine: list[Session], t0: float) -> bool:
        limits = httpx.Limits(max_connections=2, max_keepalive_connections=2)
        async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=settings.timeout_s) as client:
            return await run_kiosk(client, strategy, mine, settings, t0, t0 + cap_s, results)

    t0 = time.perf_counter()
    done = await asyncio.gather(*(kiosk(mine, t0) for _, mine in sorted(per_kiosk.items())))
    wall = time.perf_counter() - t0
    results.sort(key=lambda r: (r.session, r.turn))
    return results, wall, all(done)
