"""``Observability``: the one object the app creates in its lifespan to see and prove what happens.

It receives one ``RequestRecord`` per finished request and one record per upstream attempt, and
turns them into Prometheus metrics, per-minute SLA rows on disk, cost accounting and one JSON
log line. ``observe_*`` run on the event loop after the answer was sent, so they only update
in-memory counters; percentiles, SLA evaluation and disk writes happen once a minute, off the
loop, in ``flush``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from cloud_bridge.errors import PROVIDER_FAULT_KINDS
from cloud_bridge.redact import Redactor
from edge.config import Settings, SlaTarget
from edge.records import RequestRecord

from .cost import ROUTES, PriceBook, UsageTotals, usage_key, usage_of
from .device import DeviceSampler
from .logs import REQUEST_LOGGER, emit_request_log
from .metrics import (
    CLOUD_PHASES,
    ChildCache,
    RequestMetrics,
    StateCollector,
    StateSources,
)
from .monitor import SlaMonitor
from .sla import MINUTE_S, MinuteRow, evaluate, minute_of
from .store import MinuteStore, StoredRow

log = logging.getLogger(__name__)
PRUNE_EVERY_S = 3600.0
MAX_PENDING_ROWS = 24 * 60 * 8  # a day of rows waits in memory while the disk refuses writes


def request_unavailable(rec: RequestRecord) -> bool:
    """Counts against availability: a server-side failure (5xx) or a timeout; never a 4xx or a cancel."""
    if rec.outcome != "error":
        return False
    code = rec.error_code or ""
    # status < 400 with outcome "error": the stream broke after a 200 was sent, the user got no answer.
    return rec.status >= 500 or rec.status == 408 or "timeout" in code or rec.status < 400


def _call_attr(rec: object, name: str, default: Any = None) -> Any:
    value = getattr(rec, name, None)
    return default if value is None else value


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def call_phases(rec: object) -> dict[str, float | None]:
    """Per-phase durations in ms (dns, connect, tls, first_byte, total) of one attempt.

    ``cloud_bridge``'s ``CallTimings`` holds offsets from the start of the logical call and turns
    them into durations itself (``durations()``); a plain dict (or attributes) is read as durations.
    """
    timings = getattr(rec, "timings", None)
    if timings is not None and callable(getattr(timings, "durations", None)):
        d = timings.durations()
        return {phase: _number(d.get(phase)) for phase in CLOUD_PHASES}
    out: dict[str, float | None] = {}
    for phase in CLOUD_PHASES:
        value = timings.get(f"{phase}_ms", timings.get(phase)) if isinstance(timings, dict) else None
        out[phase] = _number(value if value is not None else getattr(rec, f"{phase}_ms", None))
    return out


def call_ttft_ms(rec: object) -> float | None:
    """The attempt's own time to first token (first byte when no token was seen), from its start."""
    t = getattr(rec, "timings", None)
    if t is not None and hasattr(t, "attempt_start_ms"):
        mark = _number(getattr(t, "first_token_ms", None)) or _number(getattr(t, "first_byte_ms", None))
        return None if mark is None else max(0.0, mark - float(t.attempt_start_ms))
    return call_phases(rec)["first_byte"]


def merge_stored(kind: str, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """How a minute written twice (restart, straggler) is combined in the store."""
    if kind == "usage":
        total = UsageTotals.from_dict(old)
        total.add(UsageTotals.from_dict(new))
        return total.to_dict()
    return MinuteRow.from_dict(old).merge(MinuteRow.from_dict(new)).to_dict()


class Observability:
    def __init__(self, settings: Settings, registry: CollectorRegistry | None = None) -> None:
        self.settings = settings
        mc = settings.metrics
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = RequestMetrics(self.registry)
        self._children = ChildCache(self.metrics)
        self._bound_breakers: Callable[[], dict[str, str]] | None = None
        # The collector reads breakers through ``_breakers``: bound states win over the last call seen.
        self.sources = StateSources(breaker_states=self.breaker_states)
        self.device = DeviceSampler(
            list(mc.tegrastats_cmd), float(getattr(mc, "device_sample_interval_s", 5.0))
        )
        self._call_breakers: dict[str, str] = {}
        self.registry.register(StateCollector(self.sources, lambda: self.device.snapshot))
        self.prices = PriceBook.from_settings(settings)
        self.store = MinuteStore(
            settings.server.data_dir / "sla",
            retention_days=mc.sla_retention_days,
            max_bytes=mc.sla_max_bytes,
        )
        self.monitor = SlaMonitor()
        from ..secret_masking import configured_secrets

        self.redact = Redactor(configured_secrets(settings))
        self.request_log = logging.getLogger(REQUEST_LOGGER)
        self.log_prompts = bool(settings.logging.log_prompts)
        self.totals: dict[str, UsageTotals] = {}  # since start, for the dashboard
        self.started_at = time.time()
        self._calls_seen = False
        self._task: asyncio.Task[None] | None = None
        self._flush_lock = asyncio.Lock()
        self._last_prune = 0.0
        self._pending: list[StoredRow] = []  # rows a failed write left behind

    # ----- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        """Reload the last hour from disk (for the dashboard), then sample the device and roll up."""
        since = minute_of(time.time()) - self.monitor.recent_minutes * MINUTE_S
        try:
            stored = await asyncio.to_thread(self.store.query, since=since, kinds=("route", "provider"))
            self.monitor.remember((MinuteRow.from_dict(r.data) for r in stored), time.time())
        except Exception:
            log.exception("could not read the SLA store at %s", self.store.path)
        await self.device.start()
        self._task = asyncio.create_task(self._rollup_loop(), name="sla-rollup")

    async def aclose(self) -> None:
        """Stop the loops and write the current, unfinished minute so a restart loses nothing."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            await self.flush(final=True)
        finally:
            await self.device.aclose()

    async def _rollup_loop(self) -> None:
        while True:
            now = time.time()
            await asyncio.sleep(minute_of(now) + MINUTE_S + self.monitor.grace_s + 0.05 - now)
            try:
                await self.flush()
            except Exception:  # the next minute tries again; requests are never affected
                log.exception("SLA roll-up failed")

    async def flush(self, now: float | None = None, final: bool = False) -> list[MinuteRow]:
        """Roll up finished minutes (all when ``final``), evaluate them, write them to disk."""
        now = time.time() if now is None else now
        async with self._flush_lock:
            collected = self.monitor.collect(now, final=final)
            if collected.rows:
                self._evaluate(collected.rows)
            rows = [StoredRow(r.minute, r.scope, r.name, r.to_dict()) for r in collected.rows]
            rows += [
                StoredRow(minute, "usage", key, u.to_dict())
                for minute, per_key in collected.usage.items()
                for key, u in per_key.items()
            ]
            rows = self._pending + rows
            self._pending = []
            if rows:
                try:
                    await asyncio.to_thread(self.store.write, rows, merge_stored)
                except Exception:  # disk full, read-only fs...: keep the rows for the next minute
                    log.exception("could not write %d SLA rows to %s; will retry", len(rows), self.store.path)
                    self._pending = rows[-MAX_PENDING_ROWS:]
            if now - self._last_prune >= PRUNE_EVERY_S:
                self._last_prune = now
                try:
                    await asyncio.to_thread(self.store.prune, now)
                except Exception:
                    log.exception("could not prune the SLA store at %s", self.store.path)
            return collected.rows

    def _evaluate(self, rows: list[MinuteRow]) -> None:
        try:
            result = evaluate(rows, self.settings.metrics.sla, SlaTarget())
        except ValueError:
            log.exception("invalid SLA exclusion window in [metrics.sla]")
            return
        for breach in result.breaches:
            self.monitor.recent_breaches.append(breach)
            for kind in breach.kinds:
                self.metrics.sla_breaches.labels(breach.scope, breach.name, kind).inc()
            log.warning(
                "SLA breach %s %s at %s: %s",
                breach.scope,
                breach.name,
                breach.to_dict()["start"],
                ",".join(breach.kinds),
            )

    # ----- per request (hot path) -------------------------------------------------------------------
    def observe_request(self, rec: RequestRecord) -> None:
        """Count one finished request everywhere; called on the event loop, so counters only."""
        m = self.metrics
        route = rec.route if rec.route in ROUTES else ""
        self._children.requests(route or "none", rec.reason, rec.outcome or "ok").inc()
        usage = usage_of(rec, self.prices)
        if route:
            c = self._children.route(route)
            if rec.ttft_ms is not None:
                c.ttft.observe(rec.ttft_ms / 1000.0)
            if rec.total_ms is not None:
                c.latency.observe(rec.total_ms / 1000.0)
            if rec.queue_ms is not None:
                c.queue_wait.observe(rec.queue_ms / 1000.0)
            if rec.tokens_per_s:
                c.tokens_per_s.observe(rec.tokens_per_s)
            if rec.prompt_tokens:
                c.prompt_tokens.inc(rec.prompt_tokens)
            if rec.completion_tokens:
                c.completion_tokens.inc(rec.completion_tokens)
            if usage.avoided_usd:
                c.money_saved.inc(usage.avoided_usd)
            if usage.cost_usd:
                m.cloud_cost.labels(rec.provider or self.prices.reference_name).inc(usage.cost_usd)
        for backend in rec.early_dropped.split(",") if rec.early_dropped else []:
            m.early_starts.labels(backend, "dropped").inc()
        if rec.early_start == "kept" and rec.route in ROUTES:
            m.early_starts.labels(rec.route, "used").inc()
        if usage.cache_hits:
            m.cache.labels("hit").inc()
        elif usage.cache_misses:
            m.cache.labels("miss").inc()

        ended = rec.started_at + (rec.total_ms or 0.0) / 1000.0
        key = usage_key(rec)
        self.monitor.add_usage(ended, key, usage)
        total = self.totals.get(key)
        if total is None:
            self.totals[key] = usage.copy()
        else:
            total.add(usage)
        if route:
            unavailable = request_unavailable(rec)
            error = rec.outcome == "error"
            self.monitor.bucket(ended, "route", route).add(
                request_id=rec.request_id,
                ttft_ms=rec.ttft_ms,
                total_ms=rec.total_ms,
                error=error,
                unavailable=unavailable,
            )
            if route == "cloud" and rec.provider and not self._calls_seen:
                # Until the bridge reports its attempts, judge the provider by the gateway's view.
                self.monitor.bucket(ended, "provider", rec.provider).add(
                    request_id=rec.request_id,
                    ttft_ms=rec.ttft_ms,
                    total_ms=rec.total_ms,
                    error=error,
                    unavailable=unavailable,
                )
        emit_request_log(self.request_log, rec, log_prompts=self.log_prompts, redact=self.redact)

    def observe_cloud_call(self, rec: object, at: float | None = None) -> None:
        """One record from ``cloud_bridge``'s ``on_call`` (its ``CallRecord``, or any object with its fields).

        Attempts (``logical=False``) feed the per-provider metrics and SLA minutes; the whole-call
        record (``logical=True``) repeats the last attempt, so it only counts calls. A cancelled
        attempt (the kiosk went away) says nothing about the provider and is only counted. ``at``
        (wall clock) is for replays and tests; live records are stamped on arrival.
        """
        m = self.metrics
        provider = str(_call_attr(rec, "provider", "unknown"))[:60]
        ok = bool(_call_attr(rec, "ok", False))
        if _call_attr(rec, "logical", False):
            m.cloud_requests.labels(provider, "ok" if ok else "error").inc()
            return
        self._calls_seen = True
        breaker = _call_attr(rec, "breaker_state")
        if breaker:
            self._call_breakers[provider] = str(getattr(breaker, "value", breaker))
        if _call_attr(rec, "cancelled", False):
            m.cloud_calls.labels(provider, "cancelled").inc()
            return
        status = _call_attr(rec, "status")
        status = int(status) if isinstance(status, int) else None
        kind = str(_call_attr(rec, "error_kind", "") or "")[:40]
        was_429 = bool(_call_attr(rec, "was_429", status == 429))
        m.cloud_calls.labels(provider, "ok" if ok else "error").inc()
        if not ok:
            m.cloud_errors.labels(provider, kind or (f"http_{status}" if status else "unknown")).inc()
        if _call_attr(rec, "retried", False):
            m.cloud_retries.labels(provider).inc()
        if was_429:
            m.cloud_429.labels(provider).inc()
        phases = call_phases(rec)
        for phase, ms in phases.items():
            if ms is not None:
                m.cloud_phase.labels(provider, phase).observe(ms / 1000.0)
        unavailable = (
            not ok
            and not was_429
            and (
                kind in PROVIDER_FAULT_KINDS
                or (status is not None and status >= 500)
                or (status is None and not kind)
            )
        )
        if at is None:
            at = _number(_call_attr(rec, "ended_at"))
        if at is None or at < 1e9:  # absent, or a monotonic reading: stamp it now
            at = time.time()
        self.monitor.bucket(at, "provider", provider).add(
            request_id=str(_call_attr(rec, "request_id", "")),
            ttft_ms=call_ttft_ms(rec),
            total_ms=phases["total"],
            error=not ok,
            unavailable=unavailable,
            rate_limited=was_429,
        )

    # ----- state read at scrape time ----------------------------------------------------------------
    def bind_state(
        self,
        *,
        queue_depth: Callable[[], int],
        model_loaded: Callable[[], bool],
        breaker_states: Callable[[], dict[str, str]],
        update_status: Callable[[], dict] | None,
        installed_version: Callable[[], str | None],
        edge_slots: Callable[[], tuple[int, int]] | None = None,
        edge_batches: Callable[[], tuple[int, int]] | None = None,
        knowledge_status: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        """Live state the gauges read at scrape time (pulled, so never stale and never pushed)."""
        self.sources.queue_depth = queue_depth
        self.sources.model_loaded = model_loaded
        self._bound_breakers = breaker_states
        self.sources.update_status = update_status
        self.sources.installed_version = installed_version
        self.sources.edge_slots = edge_slots
        self.sources.edge_batches = edge_batches
        self.sources.knowledge_status = knowledge_status

    def breaker_states(self) -> dict[str, str]:
        """Each provider's breaker: the bridge's bound states, else the last attempt's report."""
        states = dict(self._call_breakers)
        if self._bound_breakers is not None:
            with contextlib.suppress(Exception):
                states.update({str(k): str(v) for k, v in (self._bound_breakers() or {}).items()})
        return states

    def render_metrics(self) -> tuple[bytes, str]:
        """The Prometheus text page and its content type (scrape-time gauges are read now)."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
