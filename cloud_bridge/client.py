"""The cloud bridge: one pooled HTTP/2 client per provider, retries, breakers, fail-over, phases.

Why this shape: an escalated kiosk request should pay neither a fresh TCP+TLS handshake (the
clients are long-lived, warmed at start-up and kept warm while idle) nor an unlucky provider
(retries with jittered back-off under a budget, a breaker per provider, fail-over in priority
order). Retrying is only safe while nothing has reached the kiosk yet, so every retry decision
happens before the first :class:`ContentDelta` or :class:`ToolCallDelta` is yielded; after it, a
failure is raised with ``before_first_token=False`` and the router decides. The connections
themselves (clients, warm-up, keep-warm probes) are ``cloud_bridge.pool``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from cloud_bridge.breaker import CircuitBreaker
from cloud_bridge.config import CloudConfig, ProviderConfig
from cloud_bridge.deadline import DeadlineExceeded, Watchdog
from cloud_bridge.errors import BREAKER_KINDS, CloudError
from cloud_bridge.events import ContentDelta, StreamDone, ToolCallDelta
from cloud_bridge.percentile import nearest_rank
from cloud_bridge.pool import Provider, keep_warm, open_client, probe
from cloud_bridge.redact import RedactingFilter, Redactor, provider_secrets, safe_url
from cloud_bridge.retry import RetryBudget, full_jitter_backoff
from cloud_bridge.timings import CallTimings, DnsCache, PhaseTrace
from cloud_bridge.upstream import ResponseReader

log = logging.getLogger("cloud_bridge")

_REQUEST_ID_HEADERS = ("x-request-id", "request-id", "x-amzn-requestid", "x-dashscope-request-id", "trace-id")


@dataclass
class CallRecord:
    """One upstream attempt (``logical=False``) or the whole call (``logical=True``), for metrics/SLA."""

    provider: str | None
    ok: bool
    status: int | None
    error_kind: str | None
    timings: CallTimings
    retried: bool
    was_429: bool
    breaker_state: str
    request_id: str = ""
    logical: bool = False
    attempt: int = 0
    cancelled: bool = False
    usage: dict[str, Any] | None = None


class CloudBridge:
    """Client of every configured OpenAI-compatible upstream; create in the app lifespan."""

    def __init__(
        self,
        config: CloudConfig,
        on_call: Callable[[CallRecord], None] | None = None,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self._on_call = on_call
        self._rng = rng or random.Random()
        self._dns = DnsCache(config.dns_cache_ttl_s)
        self._providers = [
            Provider(
                cfg=p,
                breaker=CircuitBreaker(
                    consecutive=p.breaker_consecutive_failures,
                    error_rate=p.breaker_error_rate,
                    window_s=p.breaker_window_s,
                    min_calls=p.breaker_min_calls,
                    open_s=p.breaker_open_s,
                ),
                budget=RetryBudget(ratio=p.retry_budget_ratio),
            )
            for p in config.providers
            if p.base_url
        ]
        self._redact = Redactor(s for p in config.providers for s in provider_secrets(p))
        self._log_filter = RedactingFilter(self._redact)
        self._ttfts: deque[float] = deque(maxlen=max(1, config.ttft_window))
        self._keep_warm_task: asyncio.Task[None] | None = None
        self._started = False

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Create the pooled clients, open one warm connection per provider, start keep-warm."""
        self._ensure_clients()
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).addFilter(self._log_filter)
        if self.config.warmup and self._providers:
            await asyncio.gather(*(probe(p, self._redact) for p in self._providers))
        if self.config.keep_warm and self._providers and self._keep_warm_task is None:
            self._keep_warm_task = asyncio.create_task(keep_warm(self._providers, self._redact), name="cloud-keep-warm")

    async def aclose(self) -> None:
        if self._keep_warm_task is not None:
            self._keep_warm_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keep_warm_task
            self._keep_warm_task = None
        for prov in self._providers:
            if prov.client is not None:
                await prov.client.aclose()
                prov.client = None
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).removeFilter(self._log_filter)
        self._started = False

    def _ensure_clients(self) -> None:
        if self._started:
            return
        for prov in self._providers:
            self._redact.add(prov.cfg.resolved_api_key())
            open_client(prov)
        self._started = True

    # ----------------------------------------------------------------- state for the router
    @property
    def enabled(self) -> bool:
        """At least one provider is configured."""
        return bool(self._providers)

    def available(self) -> bool:
        """Some provider is configured and its breaker would let a call through now."""
        return any(p.breaker.would_allow() for p in self._providers)

    def breaker_states(self) -> dict[str, str]:
        return {p.name: p.breaker.state for p in self._providers}

    def ttft_quantile_s(self, q: float = 0.95) -> float | None:
        """Live time-to-first-token quantile over recent successes (what the router hedges on)."""
        return nearest_rank(self._ttfts, q)

    def redact(self, text: str) -> str:
        """Mask every configured key (and key-looking strings) in ``text``."""
        return self._redact(text)

    # ----------------------------------------------------------------- calls
    async def complete_chat(
        self,
        body: dict[str, Any],
        *,
        request_id: str,
        route_model: str = "edgecloud-cloud",
        deadline_s: float | None = None,
    ) -> tuple[str, StreamDone]:
        """Whole answer at once (same retries and fail-over as streaming, which it is built on)."""
        parts: list[str] = []
        done: StreamDone | None = None
        async with contextlib.aclosing(
            self.stream_chat(body, request_id=request_id, route_model=route_model, deadline_s=deadline_s)
        ) as stream:
            async for item in stream:
                if isinstance(item, ContentDelta):
                    parts.append(item.text)
                elif isinstance(item, StreamDone):
                    done = item
        if done is None:  # pragma: no cover - stream_chat always ends with StreamDone or raises
            raise CloudError("bad_response", "the upstream stream ended without a result")
        return "".join(parts), done

    async def stream_chat(
        self,
        body: dict[str, Any],
        *,
        request_id: str,
        route_model: str = "edgecloud-cloud",
        deadline_s: float | None = None,
    ) -> AsyncIterator[ContentDelta | ToolCallDelta | StreamDone]:
        """Yield the answer's text and tool-call pieces as they arrive, then one :class:`StreamDone`.

        Retries and fail-over happen only before the first delta. Closing this iterator
        (or cancelling the task) closes the upstream response at once.
        """
        self._ensure_clients()
        call_start = time.perf_counter()
        call_deadline = call_start + deadline_s if deadline_s is not None else math.inf
        if not self._providers:
            raise CloudError("no_provider", "no cloud provider is configured", retryable=False)
        attempts = 0
        yielded = False
        retried = False
        last_error: CloudError | None = None
        final_timings = CallTimings()
        for prov in self._providers:
            if time.perf_counter() >= call_deadline:
                if last_error is None:
                    last_error = CloudError("timeout_total", "the request deadline passed before a provider answered")
                break
            if not prov.breaker.allow():
                if last_error is None or last_error.kind == "breaker_open":  # keep a more telling error
                    last_error = CloudError(
                        "breaker_open", f"provider {prov.name} is unavailable (circuit open)",
                        provider=prov.name, retryable=True,
                    )
                continue
            prov.budget.on_request()
            retry_index = 0
            while True:
                attempts += 1
                start_ms = (time.perf_counter() - call_start) * 1e3
                timings = CallTimings(attempts=attempts, attempt_start_ms=start_ms)
                final_timings = timings
                status: int | None = None
                try:
                    done: StreamDone | None = None
                    async with contextlib.aclosing(
                        self._attempt(prov, body, request_id, route_model, call_start, call_deadline, timings)
                    ) as agen:
                        async for item in agen:
                            if not isinstance(item, StreamDone):
                                yielded = True
                                yield item
                            else:
                                done = item
                    assert done is not None
                    status = 200
                except CloudError as err:
                    err.before_first_token = not yielded
                    err.provider = prov.name
                    timings.total_ms = (time.perf_counter() - call_start) * 1e3
                    if err.kind in BREAKER_KINDS:
                        prov.breaker.record_failure()
                    else:
                        prov.breaker.release()
                    self._emit(CallRecord(
                        provider=prov.name, ok=False, status=err.status, error_kind=err.kind, timings=timings,
                        retried=retry_index > 0 or prov is not self._providers[0], was_429=err.status == 429,
                        breaker_state=prov.breaker.state, request_id=request_id, attempt=attempts,
                    ))
                    last_error = err
                    if yielded:
                        self._emit_logical(prov.name, err, timings, retried, request_id)
                        raise
                    delay = self._retry_delay(prov, err, retry_index, call_deadline)
                    if delay is None:
                        break  # fail over to the next provider
                    retried = True
                    retry_index += 1
                    await asyncio.sleep(delay)
                    if not prov.breaker.allow():
                        break  # opened meanwhile (other calls failed too): fail over, keep this error
                    continue
                except BaseException as exc:
                    # The caller went away (aclose / cancellation): no verdict on the provider.
                    # Anything else here is a bug of ours, recorded as such and re-raised.
                    prov.breaker.release()
                    timings.total_ms = (time.perf_counter() - call_start) * 1e3
                    cancelled = isinstance(exc, (GeneratorExit, asyncio.CancelledError))
                    self._emit(CallRecord(
                        provider=prov.name, ok=False, status=status,
                        error_kind=None if cancelled else "internal", timings=timings,
                        retried=retried, was_429=False, breaker_state=prov.breaker.state,
                        request_id=request_id, attempt=attempts, cancelled=cancelled,
                    ))
                    raise
                # success
                prov.breaker.record_success()
                timings.total_ms = (time.perf_counter() - call_start) * 1e3
                if timings.first_token_ms is not None:
                    self._ttfts.append(timings.first_token_ms / 1e3)
                record = CallRecord(
                    provider=prov.name, ok=True, status=200, error_kind=None, timings=timings,
                    retried=retried, was_429=False, breaker_state=prov.breaker.state,
                    request_id=request_id, attempt=attempts, usage=done.usage,
                )
                self._emit(record)
                self._emit(CallRecord(**{**record.__dict__, "logical": True}))
                yield done
                return
        error = last_error or CloudError("no_provider", "no cloud provider is available")
        error.before_first_token = True
        final_timings.total_ms = (time.perf_counter() - call_start) * 1e3
        self._emit_logical(error.provider, error, final_timings, retried, request_id)
        raise error

    def _retry_delay(
        self, prov: Provider, err: CloudError, retry_index: int, call_deadline: float
    ) -> float | None:
        """Seconds to wait before retrying the same provider, or None to move on."""
        cfg = prov.cfg
        if not err.retryable or retry_index >= cfg.max_retries:
            return None
        if prov.breaker.state == "open":
            return None
        delay = full_jitter_backoff(retry_index, cfg.backoff_base_s, cfg.backoff_max_s, self._rng)
        if err.retry_after_s is not None:
            delay = max(delay, err.retry_after_s)
        remaining = call_deadline - time.perf_counter()
        if delay >= remaining or delay > cfg.total_timeout_s:
            return None  # waiting would eat the deadline: better to fail over now
        if not prov.budget.try_retry():
            return None
        return delay

    def _emit(self, record: CallRecord) -> None:
        if self._on_call is None:
            return
        try:
            self._on_call(record)
        except Exception:  # a metrics bug must not fail a kiosk request
            log.exception("on_call callback failed")

    def _emit_logical(
        self, provider: str | None, err: CloudError, timings: CallTimings, retried: bool, request_id: str
    ) -> None:
        prov = next((p for p in self._providers if p.name == provider), None)
        self._emit(CallRecord(
            provider=provider, ok=False, status=err.status, error_kind=err.kind, timings=timings,
            retried=retried, was_429=err.status == 429,
            breaker_state=prov.breaker.state if prov else "closed", request_id=request_id,
            logical=True, attempt=timings.attempts,
        ))

    # ----------------------------------------------------------------- one attempt
    def _payload(self, cfg: ProviderConfig, body: dict[str, Any], route_model: str) -> dict[str, Any]:
        payload = {k: v for k, v in body.items() if k not in ("model", "stream", "stream_options")}
        payload["model"] = cfg.model_map.get(route_model, cfg.model)
        if cfg.stream:
            payload["stream"] = True
            if cfg.stream_usage:
                payload["stream_options"] = {"include_usage": True}
        else:
            payload["stream"] = False
        return payload

    def _headers(self, cfg: ProviderConfig, request_id: str) -> dict[str, str]:
        headers = dict(cfg.extra_headers)
        headers["x-request-id"] = request_id
        headers["accept"] = "text/event-stream" if cfg.stream else "application/json"
        if cfg.stream:
            # Nobody compresses SSE usefully; identity lets the reader skip httpx's decoder layer.
            headers["accept-encoding"] = "identity"
        key = cfg.resolved_api_key()
        if key:
            self._redact.add(key)
            headers.update(cfg.auth_headers())
        return headers

    def _fail(self, kind: str, message: str, **kwargs: Any) -> CloudError:
        return CloudError(kind, self._redact(message), **kwargs)

    async def _attempt(
        self,
        prov: Provider,
        body: dict[str, Any],
        request_id: str,
        route_model: str,
        call_start: float,
        call_deadline: float,
        timings: CallTimings,
    ) -> AsyncIterator[ContentDelta | ToolCallDelta | StreamDone]:
        cfg = prov.cfg
        assert prov.client is not None and prov.chat_url is not None
        prov.last_used = time.monotonic()
        attempt_start = time.perf_counter()
        hard = min(call_deadline, attempt_start + cfg.total_timeout_s)
        ttft_deadline = attempt_start + cfg.ttft_timeout_s
        trace = PhaseTrace(call_start, timings, self._dns)
        payload = self._payload(cfg, body, route_model)
        connect_timeout = max(0.001, min(cfg.connect_timeout_s, hard - attempt_start))
        request = prov.client.build_request(
            "POST", prov.chat_url, json=payload, headers=self._headers(cfg, request_id),
            extensions={"trace": trace},
            timeout=httpx.Timeout(connect_timeout, read=None),
        )

        wd = Watchdog()
        reader = ResponseReader(cfg, self._redact, trace, wd)
        limit, kind = (ttft_deadline, "timeout_ttft") if ttft_deadline <= hard else (hard, "timeout_total")
        wd.set(limit, kind)
        response: httpx.Response | None = None
        stage = "waiting for response headers"
        try:
            response = await wd.wait(prov.client.send(request, stream=True))
            timings.connection_reused = not trace.new_connection
            timings.http_version = response.http_version
            if timings.first_byte_ms is None:
                timings.first_byte_ms = trace.ms()
            upstream_id = next(
                (response.headers[h] for h in _REQUEST_ID_HEADERS if h in response.headers), None
            )
            stage = "reading the response"
            if response.status_code != 200:
                raise await reader.status_error(response)
            if not cfg.stream:
                async with contextlib.aclosing(
                    reader.read_json(response, upstream_id, payload["model"])
                ) as whole:
                    async for item in whole:
                        yield item
                return
            stage = "streaming"
            async with contextlib.aclosing(reader.read_sse(
                response, ttft_deadline, hard, upstream_id, payload["model"]
            )) as events:
                async for item in events:
                    yield item
        except DeadlineExceeded as exc:
            raise reader.timeout(exc.kind, stage) from None
        except httpx.ConnectTimeout as exc:
            raise self._fail("timeout_connect", f"connect to {safe_url(cfg.base_url)} timed out") from exc
        except httpx.PoolTimeout as exc:
            raise self._fail("timeout_connect", "no free connection to the provider in time") from exc
        except httpx.ConnectError as exc:
            raise self._fail("connect", f"cannot connect to {safe_url(cfg.base_url)}: {exc}") from exc
        except (httpx.NetworkError, httpx.ProtocolError) as exc:
            message = f"connection to the provider failed: {type(exc).__name__}: {exc}"
            raise self._fail("connect", message) from exc
        except httpx.TimeoutException as exc:
            raise self._fail("timeout_total", f"provider timed out: {exc}") from exc
        except httpx.DecodingError as exc:
            raise self._fail("bad_response", f"undecodable response body: {exc}") from exc
        except httpx.HTTPError as exc:  # InvalidURL, UnsupportedProtocol, ...: a configuration problem
            message = f"request to {safe_url(cfg.base_url)} failed: {type(exc).__name__}: {exc}"
            raise self._fail("upstream_error", message, retryable=False) from exc
        finally:
            wd.close()
            if response is not None:
                await response.aclose()
