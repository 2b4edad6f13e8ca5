"""The Prometheus metric set of the gateway, on a registry owned by the app (never the global one).

Names follow Prometheus conventions (base units: seconds, bytes; ``_total`` counters) so stock
dashboards and alert rules apply. Latency buckets span 10 ms to 30 s because an LLM answer's
first token can come from the cache in milliseconds or from a cold cloud model in many seconds.
Gauges that mirror live state (queue depth, breaker state, update status, device health) are read
at scrape time by ``StateCollector`` instead of being pushed, so they are never stale.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from .device import DeviceSnapshot

NAMESPACE = "edgecloud"
LATENCY_BUCKETS_S = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.25,
    0.35,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    2.5,
    3.0,
    4.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
)
TOKENS_PER_S_BUCKETS = (1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 80.0, 120.0, 200.0, 400.0)
BREAKER_STATES = ("closed", "open", "half_open")
CLOUD_PHASES = ("dns", "connect", "tls", "first_byte", "total")

_NUMERIC_PART = re.compile(r"^-?\d+(\.\d+)?$")


def reason_label(reason: str) -> str:
    """A bounded label from a free-form reason: numbers dropped, at most two parts, 40 chars.

    ``classifier:complex:0.97`` becomes ``classifier:complex``, so each confidence value does not
    create a new time series.
    """
    if not reason:
        return "none"
    parts = [p for p in reason.split(":") if p and not _NUMERIC_PART.match(p)][:2]
    return (":".join(parts) or "none")[:40]


class RequestMetrics:
    """Counters and histograms updated once per request and once per upstream attempt."""

    def __init__(self, registry: CollectorRegistry) -> None:
        ns = NAMESPACE
        self.requests = Counter(
            "requests",
            "Finished requests by route, reason and outcome.",
            ["route", "reason", "outcome"],
            namespace=ns,
            registry=registry,
        )
        self.ttft = Histogram(
            "time_to_first_token_seconds",
            "Time from arrival to the first token sent, by route.",
            ["route"],
            namespace=ns,
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.latency = Histogram(
            "request_duration_seconds",
            "Time from arrival to the last byte, by route.",
            ["route"],
            namespace=ns,
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.queue_wait = Histogram(
            "queue_wait_seconds",
            "Time a request waited for the edge model, by route.",
            ["route"],
            namespace=ns,
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.tokens_per_s = Histogram(
            "tokens_per_second",
            "Decode speed of an answer, by route.",
            ["route"],
            namespace=ns,
            buckets=TOKENS_PER_S_BUCKETS,
            registry=registry,
        )
        self.tokens = Counter(
            "tokens",
            "Tokens by route and kind (prompt, completion).",
            ["route", "kind"],
            namespace=ns,
            registry=registry,
        )
        self.cache = Counter(
            "cache_lookups",
            "Answer-cache lookups by result (hit, miss).",
            ["result"],
            namespace=ns,
            registry=registry,
        )
        self.money_saved = Counter(
            "money_saved_usd",
            "Estimated cloud cost avoided by edge and cache answers, in USD.",
            ["route"],
            namespace=ns,
            registry=registry,
        )
        self.cloud_cost = Counter(
            "cloud_cost_usd",
            "Estimated cost of cloud answers, in USD.",
            ["provider"],
            namespace=ns,
            registry=registry,
        )
        self.cloud_calls = Counter(
            "cloud_calls",
            "Upstream attempts by provider and outcome (ok, error, cancelled).",
            ["provider", "outcome"],
            namespace=ns,
            registry=registry,
        )
        self.early_starts = Counter(
            "early_starts",
            "Backends started while the encoder decided (edge/early_start.py), by whether the answer used them.",
            ["backend", "outcome"],
            namespace=ns,
            registry=registry,
        )
        self.cloud_requests = Counter(
            "cloud_requests",
            "Whole cloud calls (all retries and fail-overs included) by the provider that ended them.",
            ["provider", "outcome"],
            namespace=ns,
            registry=registry,
        )
        self.cloud_phase = Histogram(
            "cloud_phase_seconds",
            "Upstream phase durations per attempt: dns, connect, tls, first_byte (request sent to first byte), total.",
            ["provider", "phase"],
            namespace=ns,
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.cloud_retries = Counter(
            "cloud_retries",
            "Upstream attempts that were retries.",
            ["provider"],
            namespace=ns,
            registry=registry,
        )
        self.cloud_429 = Counter(
            "cloud_rate_limited",
            "Upstream answers with status 429.",
            ["provider"],
            namespace=ns,
            registry=registry,
        )
        self.cloud_errors = Counter(
            "cloud_errors",
            "Failed upstream attempts by provider and error kind.",
            ["provider", "kind"],
            namespace=ns,
            registry=registry,
        )
        self.sla_breaches = Counter(
            "sla_breach_minutes",
            "Minutes that missed their SLA target, by scope, name and kind.",
            ["scope", "name", "kind"],
            namespace=ns,
            registry=registry,
        )


class RouteChildren:
    """The labelled children of one route, looked up once: ``labels()`` is the costly part of a metric."""

    __slots__ = (
        "completion_tokens",
        "latency",
        "money_saved",
        "prompt_tokens",
        "queue_wait",
        "tokens_per_s",
        "ttft",
    )

    def __init__(self, m: RequestMetrics, route: str) -> None:
        self.ttft = m.ttft.labels(route)
        self.latency = m.latency.labels(route)
        self.queue_wait = m.queue_wait.labels(route)
        self.tokens_per_s = m.tokens_per_s.labels(route)
        self.prompt_tokens = m.tokens.labels(route, "prompt")
        self.completion_tokens = m.tokens.labels(route, "completion")
        self.money_saved = m.money_saved.labels(route)


class ChildCache:
    """Memoised ``labels()`` lookups for the hot path, bounded so odd label values cannot grow it forever."""

    def __init__(self, metrics: RequestMetrics, limit: int = 2048) -> None:
        self.metrics = metrics
        self.limit = limit
        self._routes: dict[str, RouteChildren] = {}
        self._requests: dict[tuple[str, str, str], Any] = {}
        self._reasons: dict[str, str] = {}

    def route(self, route: str) -> RouteChildren:
        child = self._routes.get(route)
        if child is None:
            child = self._routes[route] = RouteChildren(self.metrics, route)
        return child

    def requests(self, route: str, reason: str, outcome: str) -> Any:
        label = self._reasons.get(reason)
        if label is None:
            if len(self._reasons) >= self.limit:
                self._reasons.clear()
            label = self._reasons[reason] = reason_label(reason)
        key = (route, label, outcome)
        child = self._requests.get(key)
        if child is None:
            if len(self._requests) >= self.limit:
                self._requests.clear()
            child = self._requests[key] = self.metrics.requests.labels(route, label, outcome)
        return child


@dataclass
class StateSources:
    """Callables the app binds; each is read at scrape time and may be missing (None)."""

    queue_depth: Callable[[], int] | None = None
    model_loaded: Callable[[], bool] | None = None
    breaker_states: Callable[[], dict[str, str]] | None = None
    update_status: Callable[[], dict[str, Any]] | None = None
    installed_version: Callable[[], str | None] | None = None
    # Continuous batching: (busy slots, slots) and (batch steps, tokens decoded in them) so far.
    edge_slots: Callable[[], tuple[int, int]] | None = None
    edge_batches: Callable[[], tuple[int, int]] | None = None
    knowledge_status: Callable[[], dict[str, Any]] | None = None  # edge/knowledge: pack, hit ratio, to-do list


# Bounded, non-secret fields of the update status that become labels of ``edgecloud_update_info``.
UPDATE_INFO_LABELS = ("state", "last_result", "installed_version", "channel", "hardware", "agent_version")


def flatten_update_status(status: Any) -> dict[str, Any]:
    """The update agent's status as flat scalars: nested ``{"status", "version", "finished_at"}``
    objects (``installed``, ``last_result``) become ``last_result``, ``installed_version`` ...;
    anything else nested (progress, paths) is left out.
    """
    if not isinstance(status, Mapping):
        return {}
    out: dict[str, Any] = {}
    for key, value in status.items():
        key = str(key)[:40]
        if isinstance(value, Mapping):
            if "status" in value:
                out[key] = value["status"]
            if isinstance(value.get("version"), (int, str)):
                out[f"{key}_version"] = value["version"]
            if isinstance(value.get("finished_at"), (int, float)):
                out[f"{key}_at"] = value["finished_at"]
        elif value is None or isinstance(value, (str, int, float, bool)):
            out[key] = value
    return out


def safe_call(fn: Callable[[], Any] | None, default: Any) -> Any:
    """A scrape must never fail because one source did."""
    if fn is None:
        return default
    try:
        value = fn()
    except Exception:
        return default
    return default if value is None else value


def _label_value(value: Any) -> str:
    return str(value)[:80]


class StateCollector(Collector):
    """Scrape-time gauges: edge queue and model, breakers, updates, device health."""

    def __init__(self, sources: StateSources, device: Callable[[], DeviceSnapshot | None]) -> None:
        self.sources = sources
        self.device = device

    def describe(self) -> list[Any]:
        return []  # unchecked collector: series depend on live state

    def collect(self) -> Iterator[Any]:
        src = self.sources
        ns = NAMESPACE
        yield GaugeMetricFamily(
            f"{ns}_edge_queue_depth",
            "Requests waiting for or running on the edge model.",
            value=float(safe_call(src.queue_depth, 0)),
        )
        busy, total = safe_call(src.edge_slots, (0, 0))
        yield GaugeMetricFamily(f"{ns}_edge_slots_busy", "Edge model slots answering a request now.",
                                value=float(busy))
        yield GaugeMetricFamily(f"{ns}_edge_slots", "Edge model slots ([edge] parallel).", value=float(total))
        steps, tokens = safe_call(src.edge_batches, (0, 0))
        yield CounterMetricFamily(f"{ns}_edge_batch_steps", "llama.cpp batch steps run by the edge model.",
                                  value=float(steps))
        yield CounterMetricFamily(
            f"{ns}_edge_batch_tokens",
            "Tokens decoded in those steps (divide the rates for the mean batch size).",
            value=float(tokens),
        )
        yield GaugeMetricFamily(
            f"{ns}_edge_model_loaded",
            "1 when the edge model is loaded and serving.",
            value=1.0 if safe_call(src.model_loaded, False) else 0.0,
        )
        breaker = GaugeMetricFamily(
            f"{ns}_cloud_breaker_state",
            "1 for the current circuit-breaker state of each provider.",
            labels=["provider", "state"],
        )
        states: Mapping[str, str] = safe_call(src.breaker_states, {})
        for provider, state in sorted(states.items()):
            state = str(state).lower().replace("-", "_")
            for name in BREAKER_STATES if state in BREAKER_STATES else (*BREAKER_STATES, state):
                breaker.add_metric([_label_value(provider), name], 1.0 if name == state else 0.0)
        yield breaker
        version = safe_call(src.installed_version, "")
        info = InfoMetricFamily(f"{ns}_model", "The installed edge model bundle.")
        info.add_metric([], {"version": _label_value(version or "none")})
        yield info
        yield from self._update_metrics(safe_call(src.update_status, {}))
        yield from self._device_metrics(self.device())

    def _update_metrics(self, status: Mapping[str, Any]) -> Iterator[Any]:
        ns = NAMESPACE
        flat = flatten_update_status(status)
        labels = {k: _label_value(v) for k, v in flat.items() if k in UPDATE_INFO_LABELS and v is not None}
        info = InfoMetricFamily(
            f"{ns}_update", "The fleet update agent's state, last result, installed bundle."
        )
        info.add_metric([], labels)
        yield info
        gauge = GaugeMetricFamily(
            f"{ns}_update_status_value",
            "Numeric fields of the update agent's status (timestamps, versions).",
            labels=["field"],
        )
        for key, value in sorted(flat.items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                gauge.add_metric([key], float(value))
        yield gauge

    def _device_metrics(self, snap: DeviceSnapshot | None) -> Iterator[Any]:
        ns = NAMESPACE
        if snap is None:
            return
        if snap.cpu_percent is not None:
            yield GaugeMetricFamily(f"{ns}_device_cpu_percent", "CPU use, all cores.", value=snap.cpu_percent)
        if snap.memory_used_bytes is not None:
            yield GaugeMetricFamily(
                f"{ns}_device_memory_used_bytes", "Memory in use.", value=float(snap.memory_used_bytes)
            )
            yield GaugeMetricFamily(
                f"{ns}_device_memory_total_bytes",
                "Memory installed.",
                value=float(snap.memory_total_bytes or 0),
            )
        if snap.throttled is not None:
            yield GaugeMetricFamily(
                f"{ns}_device_throttled",
                "1 when the Jetson throttled since the last sample (over-current) or runs at its junction trip point.",
                value=float(snap.throttled),
            )
        if snap.overcurrent_events is not None:
            yield CounterMetricFamily(
                f"{ns}_device_overcurrent_events", "Jetson over-current throttle events since boot.",
                value=float(snap.overcurrent_events),
            )
        if snap.tj_throttle_c is not None:
            yield GaugeMetricFamily(
                f"{ns}_device_junction_throttle_celsius", "Jetson junction temperature where throttling starts.",
                value=snap.tj_throttle_c,
            )
        t = snap.tegra
        if t is None:
            return
        if t.junction_c is not None:
            yield GaugeMetricFamily(
                f"{ns}_device_junction_temperature_celsius", "Jetson SoC junction temperature (tj).",
                value=t.junction_c,
            )
        if t.gpu_load_percent is not None:
            yield GaugeMetricFamily(
                f"{ns}_device_gpu_load_percent", "Jetson GPU (GR3D) load.", value=t.gpu_load_percent
            )
        temps = GaugeMetricFamily(
            f"{ns}_device_temperature_celsius", "Jetson temperatures by sensor.", labels=["sensor"]
        )
        for sensor, value in sorted(t.temperatures_c.items()):
            temps.add_metric([sensor], value)
        yield temps
        power = GaugeMetricFamily(
            f"{ns}_device_power_watts", "Jetson power by rail (instant).", labels=["rail"]
        )
        for rail, mw in sorted(t.power_mw.items()):
            power.add_metric([rail], mw / 1000.0)
        yield power
        if t.total_power_mw is not None:
            yield GaugeMetricFamily(
                f"{ns}_device_input_power_watts",
                "Jetson module input power.",
                value=t.total_power_mw / 1000.0,
            )
