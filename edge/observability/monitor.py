"""The SLA monitor's memory: open minute buckets, the last hour of rows, recent breaches.

Requests land in the bucket of the minute they finished in (a request is judged when its user
got the answer). ``collect`` hands over every minute that is over, plus a short grace for
stragglers, as ``MinuteRow``s and usage totals for the store; the last hour stays in memory for
the dashboard. A record for a minute already collected simply opens a new bucket that is merged
into the stored row on the next write, so nothing is dropped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from .cost import UsageTotals
from .sla import MINUTE_S, Breach, MinuteBucket, MinuteRow, minute_of

RECENT_MINUTES = 60
GRACE_S = 5.0


@dataclass
class Collected:
    rows: list[MinuteRow] = field(default_factory=list)
    usage: dict[int, dict[str, UsageTotals]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.rows or self.usage)


class SlaMonitor:
    def __init__(self, recent_minutes: int = RECENT_MINUTES, grace_s: float = GRACE_S) -> None:
        self.recent_minutes = recent_minutes
        self.grace_s = grace_s
        self._buckets: dict[int, dict[tuple[str, str], MinuteBucket]] = {}
        self._usage: dict[int, dict[str, UsageTotals]] = {}
        # (minute, scope, name) -> row, for the dashboard's last hour.
        self.recent: dict[tuple[int, str, str], MinuteRow] = {}
        self.recent_breaches: deque[Breach] = deque(maxlen=50)

    # ----- hot path -------------------------------------------------------------------------------
    def bucket(self, ts: float, scope: str, name: str) -> MinuteBucket:
        minute = minute_of(ts)
        per_minute = self._buckets.get(minute)
        if per_minute is None:
            per_minute = self._buckets[minute] = {}
        b = per_minute.get((scope, name))
        if b is None:
            b = per_minute[(scope, name)] = MinuteBucket()
        return b

    def add_usage(self, ts: float, key: str, usage: UsageTotals) -> None:
        minute = minute_of(ts)
        per_minute = self._usage.get(minute)
        if per_minute is None:
            per_minute = self._usage[minute] = {}
        total = per_minute.get(key)
        if total is None:
            per_minute[key] = usage
        else:
            total.add(usage)

    # ----- once a minute --------------------------------------------------------------------------
    def collect(self, now: float, final: bool = False) -> Collected:
        """Pop every minute that ended at least ``grace_s`` ago (every minute when ``final``)."""
        out = Collected()
        for minute in sorted(self._buckets):
            if not final and minute + MINUTE_S + self.grace_s > now:
                continue
            for (scope, name), b in sorted(self._buckets.pop(minute).items()):
                out.rows.append(b.rollup(minute, scope, name))
        for minute in sorted(self._usage):
            if not final and minute + MINUTE_S + self.grace_s > now:
                continue
            out.usage[minute] = self._usage.pop(minute)
        self.remember(out.rows, now)
        return out

    def remember(self, rows: Iterable[MinuteRow], now: float) -> None:
        for row in rows:
            key = (row.minute, row.scope, row.name)
            old = self.recent.get(key)
            self.recent[key] = old.merge(row) if old is not None else row
        oldest = minute_of(now) - self.recent_minutes * MINUTE_S
        for key in [k for k in self.recent if k[0] < oldest]:
            del self.recent[key]

    def open_rows(self) -> list[MinuteRow]:
        """Rows for minutes still being filled (the dashboard shows the current minute live)."""
        return [
            b.rollup(minute, scope, name)
            for minute, per_minute in self._buckets.items()
            for (scope, name), b in per_minute.items()
        ]

    def open_usage(self) -> dict[int, dict[str, UsageTotals]]:
        return self._usage
