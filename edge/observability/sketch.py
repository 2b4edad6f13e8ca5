"""A mergeable latency sketch with a stated relative error (DDSketch), for the SLA minute rows.

An SLA is written in percentiles ("99% of first tokens within 1 s"), and a minute row must answer
that for a busy gateway as well as a quiet one, survive a restart mid-minute (two partial rows of
one minute are merged) and roll up into a period's figure for ``edgecloud sla report``. Keeping
raw samples does not scale and a random subset biases the tail; a DDSketch (Masson, Rim and Lee,
VLDB 2019) does all three: every value ``x > 0`` is counted in bucket ``ceil(log_gamma(x))`` with
``gamma = (1 + a) / (1 - a)``, so any quantile it returns is within relative error ``a`` of the
exact nearest-rank quantile of everything added, and two sketches merge by adding bucket counts
(exactly the sketch of the union, whatever the sizes).

Why our own and not the ``ddsketch`` package: the rows are JSON in the minute store, and that
package serialises only through protobuf (a dependency the kiosk does not otherwise need) or by
reading its stores' internal ``bins``/``offset`` fields; forty lines of arithmetic are easier to
keep correct than a private-field coupling. The rank convention is the one ``sla.percentile``
names (nearest rank: the smallest value with at least ``q``% of values at or below it), and the
returned value is clamped to the exact minimum and maximum, and the top rank is the exact maximum,
so P100, the P99 of up to 100 requests and single-value minutes are exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

RELATIVE_ERROR = 0.01
# Values at or below this (milliseconds) are counted as zero: no latency is measured that finely.
MIN_VALUE = 1e-3
_log = math.log
_ceil = math.ceil


class LatencySketch:
    """Bucket counts of one latency series; ``add`` stays a log and a dict update (hot path)."""

    __slots__ = ("_gamma_ln", "_inv_gamma_ln", "bins", "count", "max", "min", "relative_error", "zeros")

    def __init__(self, relative_error: float = RELATIVE_ERROR) -> None:
        if not 0.0 < relative_error < 1.0:
            raise ValueError(f"relative error must be in (0, 1), not {relative_error}")
        self.relative_error = relative_error
        self._gamma_ln = math.log((1.0 + relative_error) / (1.0 - relative_error))
        self._inv_gamma_ln = 1.0 / self._gamma_ln
        self.bins: dict[int, int] = {}
        self.zeros = 0
        self.count = 0
        self.min = math.inf
        self.max = -math.inf

    # ----- writing ------------------------------------------------------------------------------
    def add(self, value: float) -> None:
        self.count += 1
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        if value <= MIN_VALUE:
            self.zeros += 1
            return
        key = _ceil(_log(value) * self._inv_gamma_ln)
        bins = self.bins
        bins[key] = bins.get(key, 0) + 1

    def extend(self, values: Iterable[float]) -> LatencySketch:
        for v in values:
            self.add(v)
        return self

    def merge(self, other: LatencySketch) -> LatencySketch:
        """Add ``other``'s counts in place: the result is the sketch of both series together."""
        if other.relative_error != self.relative_error:
            raise ValueError("cannot merge sketches of different relative error")
        for key, n in other.bins.items():
            self.bins[key] = self.bins.get(key, 0) + n
        self.zeros += other.zeros
        self.count += other.count
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        return self

    # ----- reading ------------------------------------------------------------------------------
    def quantile(self, q: float) -> float | None:
        """Nearest-rank ``q``-th percentile (``q`` in 0..100) within the relative error; None when empty."""
        if self.count == 0:
            return None
        rank = min(self.count, max(1, math.ceil(q / 100.0 * self.count)))
        if rank == self.count:
            return self.max
        if rank <= self.zeros:
            return max(self.min, 0.0)
        seen = self.zeros
        for key in sorted(self.bins):
            seen += self.bins[key]
            if seen >= rank:
                # The midpoint (in relative terms) of (gamma^(k-1), gamma^k]: within a of every value there.
                gamma = math.exp(self._gamma_ln)
                value = 2.0 * math.exp(key * self._gamma_ln) / (gamma + 1.0)
                return min(max(value, self.min), self.max)
        return self.max  # unreachable while counts add up

    # ----- storing (JSON in the minute store) -----------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "relative_error": self.relative_error,
            "count": self.count,
            "zeros": self.zeros,
            "min": self.min if self.count else None,
            "max": self.max if self.count else None,
            "bins": [[k, self.bins[k]] for k in sorted(self.bins)],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencySketch:
        sketch = cls(float(data.get("relative_error", RELATIVE_ERROR)))
        sketch.bins = {int(k): int(n) for k, n in data.get("bins", [])}
        sketch.zeros = int(data.get("zeros", 0))
        sketch.count = int(data.get("count", 0))
        if sketch.count:
            sketch.min = float(data["min"])
            sketch.max = float(data["max"])
        return sketch

    @classmethod
    def of(cls, values: Iterable[float], relative_error: float = RELATIVE_ERROR) -> LatencySketch:
        return cls(relative_error).extend(values)
