"""The bridge's one quantile: nearest rank, ``q`` as a fraction in 0..1.

Nearest rank (the smallest sample with at least ``q`` of the samples at or below it) never
invents a latency nobody saw, which matters for the live TTFT quantile the router hedges on and
for ``edgecloud cloud diagnose``'s P99, both taken over a few dozen samples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def nearest_rank(values: Iterable[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank; None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
