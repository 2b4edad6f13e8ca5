"""Per-minute SLA roll-up and evaluation, free of I/O and of any web framework.

Averages hide what users feel, and a provider's SLA is written in percentiles and availability,
so each finished minute becomes one ``MinuteRow`` per route and per cloud provider with
nearest-rank P50/P95/P99 (the definition SLA texts use: "99% of requests were at or under X"),
error rate, availability and a few request ids as evidence. Latencies are counted in a
``LatencySketch`` (DDSketch) rather than kept: every request of a minute counts however busy the
gateway is, quantiles are within ``RELATIVE_ERROR`` of the exact ones, and two rows of one minute
(a restart) or of many minutes (a period's roll-up) merge exactly. ``evaluate`` holds rows against the
configured targets, skipping the provider's exclusion windows (maintenance), so a claim for
credit lists only minutes the provider is accountable for.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from .sketch import RELATIVE_ERROR, LatencySketch

MINUTE_S = 60
EXAMPLE_IDS = 3
SCOPES = ("route", "provider")


class TargetLike(Protocol):
    """What ``edge.config.SlaTarget`` provides; a Protocol keeps this module free of the config."""

    ttft_p99_s: float
    availability: float
    exclusions: list[str]


def minute_of(ts: float) -> int:
    """Start (epoch seconds, UTC) of the minute that contains ``ts``."""
    return int(ts // MINUTE_S) * MINUTE_S


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """The edge package's one percentile: nearest rank, ``q`` in 0..100, of already sorted values.

    Nearest rank (the smallest value with at least ``q``% of values at or below it) is the
    definition SLA texts use and the one ``LatencySketch.quantile`` approximates; None for no data.
    """
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


class MinuteBucket:
    """Accumulates one minute of one route or provider; ``add`` must stay cheap (hot path)."""

    __slots__ = (
        "errors",
        "failed_ids",
        "rate_limited",
        "rejected",
        "requests",
        "slow",
        "total",
        "ttft",
        "unavailable",
    )

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.unavailable = 0
        self.rate_limited = 0
        self.rejected = 0
        self.ttft = LatencySketch()
        self.total = LatencySketch()
        self.slow: list[tuple[float, str]] = []  # (ttft_ms, request id): the slowest few, as evidence
        self.failed_ids: list[str] = []

    def add(
        self,
        *,
        request_id: str,
        ttft_ms: float | None,
        total_ms: float | None,
        error: bool,
        unavailable: bool,
        rate_limited: bool = False,
    ) -> None:
        self.requests += 1
        if error:
            self.errors += 1
        if unavailable:
            self.unavailable += 1
            if len(self.failed_ids) < EXAMPLE_IDS and request_id:
                self.failed_ids.append(request_id)
        if rate_limited:
            self.rate_limited += 1
        if ttft_ms is not None:
            self.ttft.add(ttft_ms)
            if request_id:
                slow = self.slow
                if len(slow) < EXAMPLE_IDS:
                    slow.append((ttft_ms, request_id))
                    slow.sort(reverse=True)
                elif ttft_ms > slow[-1][0]:
                    slow[-1] = (ttft_ms, request_id)
                    slow.sort(reverse=True)
        if total_ms is not None:
            self.total.add(total_ms)

    def rollup(self, minute: int, scope: str, name: str) -> MinuteRow:
        return MinuteRow.build(
            minute=minute,
            scope=scope,
            name=name,
            requests=self.requests,
            errors=self.errors,
            unavailable=self.unavailable,
            rate_limited=self.rate_limited,
            ttft=self.ttft,
            total=self.total,
            slowest_ids=[rid for _, rid in self.slow],
            failed_ids=list(self.failed_ids),
        )


@dataclass
class MinuteRow:
    """One minute of one route (scope "route") or cloud provider (scope "provider").

    The quantile fields are read from the sketches (within ``RELATIVE_ERROR``), rounded to 0.1 ms.
    """

    minute: int
    scope: str
    name: str
    requests: int
    errors: int
    unavailable: int
    rate_limited: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    ttft_p99_ms: float | None
    total_p50_ms: float | None
    total_p95_ms: float | None
    total_p99_ms: float | None
    error_rate: float
    availability: float
    slowest_ids: list[str] = field(default_factory=list)
    failed_ids: list[str] = field(default_factory=list)
    ttft_sketch: dict[str, Any] = field(default_factory=lambda: LatencySketch().to_dict())
    total_sketch: dict[str, Any] = field(default_factory=lambda: LatencySketch().to_dict())

    @property
    def relative_error(self) -> float:
        return float(self.ttft_sketch.get("relative_error", RELATIVE_ERROR))

    def sketches(self) -> tuple[LatencySketch, LatencySketch]:
        """The (ttft, total) sketches, fresh objects: merging them never changes this row."""
        return LatencySketch.from_dict(self.ttft_sketch), LatencySketch.from_dict(self.total_sketch)

    @classmethod
    def build(
        cls,
        *,
        minute: int,
        scope: str,
        name: str,
        requests: int,
        errors: int,
        unavailable: int,
        rate_limited: int,
        ttft: LatencySketch | list[float],
        total: LatencySketch | list[float],
        slowest_ids: list[str],
        failed_ids: list[str],
    ) -> MinuteRow:
        """A row from counts and the minute's latencies (a sketch, or raw values that are sketched)."""
        ttft_s = ttft if isinstance(ttft, LatencySketch) else LatencySketch.of(ttft)
        total_s = total if isinstance(total, LatencySketch) else LatencySketch.of(total)
        return cls(
            minute=minute,
            scope=scope,
            name=name,
            requests=requests,
            errors=errors,
            unavailable=unavailable,
            rate_limited=rate_limited,
            ttft_p50_ms=_rounded(ttft_s.quantile(50)),
            ttft_p95_ms=_rounded(ttft_s.quantile(95)),
            ttft_p99_ms=_rounded(ttft_s.quantile(99)),
            total_p50_ms=_rounded(total_s.quantile(50)),
            total_p95_ms=_rounded(total_s.quantile(95)),
            total_p99_ms=_rounded(total_s.quantile(99)),
            error_rate=(errors / requests) if requests else 0.0,
            availability=(1.0 - unavailable / requests) if requests else 1.0,
            slowest_ids=slowest_ids,
            failed_ids=failed_ids,
            ttft_sketch=ttft_s.to_dict(),
            total_sketch=total_s.to_dict(),
        )

    def merge(self, other: MinuteRow) -> MinuteRow:
        """The same minute written twice (a restart mid-minute): the sketches add, so this is exact."""
        slow_ms = max(self.ttft_p99_ms or 0.0, 0.0) >= max(other.ttft_p99_ms or 0.0, 0.0)
        first, second = (self, other) if slow_ms else (other, self)
        slow = [*first.slowest_ids, *(rid for rid in second.slowest_ids if rid not in first.slowest_ids)]
        slow = slow[:EXAMPLE_IDS]
        ttft, total = self.sketches()
        other_ttft, other_total = other.sketches()
        return MinuteRow.build(
            minute=self.minute,
            scope=self.scope,
            name=self.name,
            requests=self.requests + other.requests,
            errors=self.errors + other.errors,
            unavailable=self.unavailable + other.unavailable,
            rate_limited=self.rate_limited + other.rate_limited,
            ttft=ttft.merge(other_ttft),
            total=total.merge(other_total),
            slowest_ids=slow,
            failed_ids=(self.failed_ids + other.failed_ids)[:EXAMPLE_IDS],
        )

    def to_dict(self, samples: bool = True) -> dict[str, Any]:
        """The row as stored; ``samples=False`` leaves the sketches out (reports, the dashboard)."""
        data = asdict(self)
        if not samples:
            data.pop("ttft_sketch")
            data.pop("total_sketch")
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MinuteRow:
        """A stored row; rows written before sketches (raw ``*_samples``) are sketched on reading."""
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("ttft", "total"):
            if f"{name}_sketch" not in values and f"{name}_samples" in data:
                values[f"{name}_sketch"] = LatencySketch.of(data[f"{name}_samples"]).to_dict()
        return cls(**values)


def rollup(rows: Iterable[MinuteRow]) -> tuple[LatencySketch, LatencySketch]:
    """The merged (ttft, total) sketches of many rows: a period's quantiles, exact to the sketch."""
    ttft, total = LatencySketch(), LatencySketch()
    for row in rows:
        row_ttft, row_total = row.sketches()
        ttft.merge(row_ttft)
        total.merge(row_total)
    return ttft, total


@dataclass
class Breach:
    """One minute that missed its target, with what a credit claim needs."""

    minute: int
    scope: str
    name: str
    kinds: list[str]
    requests: int
    unavailable: int
    errors: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    ttft_p99_ms: float | None
    availability: float
    target_ttft_p99_ms: float
    target_availability: float
    slowest_ids: list[str]
    failed_ids: list[str]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["start"] = iso(self.minute)
        data["end"] = iso(self.minute + MINUTE_S)
        return data


@dataclass
class Evaluation:
    """Every minute of a period held against its target, and the period's totals."""

    minutes: list[tuple[MinuteRow, str]]  # (row, "ok" | "breach" | "excluded" | "no-target" | "too-few")
    breaches: list[Breach]

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per scope:name: counted, excluded and breached minutes; availability outside exclusions.

        The period's TTFT quantiles come from the counted minutes' sketches merged (every request
        weighs the same, however busy its minute was), within the sketches' relative error.
        """
        out: dict[str, dict[str, Any]] = {}
        counted: dict[str, list[MinuteRow]] = {}
        for row, verdict in self.minutes:
            key = f"{row.scope}:{row.name}"
            s = out.setdefault(
                key,
                {
                    "scope": row.scope,
                    "name": row.name,
                    "minutes": 0,
                    "excluded_minutes": 0,
                    "breached_minutes": 0,
                    "requests": 0,
                    "unavailable": 0,
                    "availability": 1.0,
                },
            )
            if verdict == "excluded":
                s["excluded_minutes"] += 1
                continue
            s["minutes"] += 1
            counted.setdefault(key, []).append(row)
            s["requests"] += row.requests
            s["unavailable"] += row.unavailable
            if verdict == "breach":
                s["breached_minutes"] += 1
        for key, s in out.items():
            s["availability"] = 1.0 - s["unavailable"] / s["requests"] if s["requests"] else 1.0
            ttft, _ = rollup(counted.get(key, []))
            for q in (50, 95, 99):
                s[f"ttft_p{q}_ms"] = _rounded(ttft.quantile(q))
            s["relative_error"] = ttft.relative_error
        return out


_DURATION = re.compile(r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+)S)?)?$")


def parse_instant(text: str) -> float:
    """An ISO-8601 timestamp as epoch seconds; a missing zone means UTC (kiosk clocks run in UTC)."""
    value = text.strip()
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    dt = datetime.fromisoformat(value)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def parse_duration(text: str) -> timedelta:
    """An ISO-8601 duration limited to days, hours, minutes, seconds (``PT2H``, ``P1DT30M``)."""
    m = _DURATION.match(text.strip().upper())
    if not m or text.strip().upper() in ("P", "PT"):
        raise ValueError(f"not an ISO-8601 duration: {text!r}")
    return timedelta(
        days=int(m["d"] or 0),
        hours=int(m["h"] or 0),
        minutes=int(m["m"] or 0),
        seconds=int(m["s"] or 0),
    )


def parse_window(text: str) -> tuple[float, float]:
    """An ISO-8601 interval ``start/end`` or ``start/duration`` as (start, end) epoch seconds."""
    start_text, sep, end_text = text.partition("/")
    if not sep:
        raise ValueError(f"an exclusion window needs 'start/end' or 'start/duration': {text!r}")
    start = parse_instant(start_text)
    end_text = end_text.strip()
    end = (
        start + parse_duration(end_text).total_seconds()
        if end_text.upper().startswith("P")
        else parse_instant(end_text)
    )
    if end <= start:
        raise ValueError(f"exclusion window ends before it starts: {text!r}")
    return start, end


def excluded(minute: int, windows: Iterable[tuple[float, float]]) -> bool:
    """A minute is excluded when it overlaps a window at all (the provider's maintenance wins)."""
    end = minute + MINUTE_S
    return any(start < end and minute < stop for start, stop in windows)


def target_for(row: MinuteRow, targets: Mapping[str, TargetLike], default: TargetLike) -> TargetLike | None:
    """Providers: ``sla[name]``, else ``sla["*"]``, else the default target.

    Routes have a target only when the operator set ``sla["route:<name>"]``.
    """
    if row.scope == "provider":
        return targets.get(row.name) or targets.get("*") or default
    return targets.get(f"route:{row.name}")


def evaluate(rows: Iterable[MinuteRow], targets: Mapping[str, TargetLike], default: TargetLike) -> Evaluation:
    windows_cache: dict[int, list[tuple[float, float]]] = {}
    minutes: list[tuple[MinuteRow, str]] = []
    breaches: list[Breach] = []
    for row in sorted(rows, key=lambda r: (r.minute, r.scope, r.name)):
        target = target_for(row, targets, default)
        if target is None:
            minutes.append((row, "no-target"))
            continue
        windows = windows_cache.get(id(target))
        if windows is None:
            windows = [parse_window(w) for w in target.exclusions]
            windows_cache[id(target)] = windows
        if excluded(row.minute, windows):
            minutes.append((row, "excluded"))
            continue
        if row.requests < int(getattr(target, "min_requests", 1) or 1):
            minutes.append((row, "too-few"))
            continue
        kinds = []
        limit_ms = target.ttft_p99_s * 1000.0
        if row.ttft_p99_ms is not None and row.ttft_p99_ms > limit_ms:
            kinds.append("ttft_p99")
        if row.availability < target.availability:
            kinds.append("availability")
        if not kinds:
            minutes.append((row, "ok"))
            continue
        minutes.append((row, "breach"))
        breaches.append(
            Breach(
                minute=row.minute,
                scope=row.scope,
                name=row.name,
                kinds=kinds,
                requests=row.requests,
                unavailable=row.unavailable,
                errors=row.errors,
                ttft_p50_ms=row.ttft_p50_ms,
                ttft_p95_ms=row.ttft_p95_ms,
                ttft_p99_ms=row.ttft_p99_ms,
                availability=row.availability,
                target_ttft_p99_ms=limit_ms,
                target_availability=target.availability,
                slowest_ids=row.slowest_ids,
                failed_ids=row.failed_ids,
            )
        )
    return Evaluation(minutes=minutes, breaches=breaches)
