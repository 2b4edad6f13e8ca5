"""The benchmarks' one percentile: linear interpolation between closest ranks, ``q`` in 0..100.

This is numpy's default (``method="linear"``, Hyndman and Fan's type 7), so a figure here and one
computed with ``numpy.percentile`` on the same samples agree. Benchmarks compare strategies and
runs against each other, where a smooth estimator is fairer than nearest rank on small samples;
the gateway's SLA figures use nearest rank instead (``edge.observability.sla.percentile``), the
definition SLA texts use.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) of ``values``, linearly interpolated; None when empty."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"a percentile is in 0..100, not {q}")
    ordered = sorted(values)
    if not ordered:
        return None
    k = (len(ordered) - 1) * q / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(ordered) - 1)
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo))


def percentiles(
    values: Sequence[float], qs: Iterable[float] = (50, 95, 99), digits: int = 4
) -> dict[str, float | None]:
    """``{"p50": .., "p95": .., "p99": ..}`` rounded to ``digits``; every value None when empty."""
    out: dict[str, float | None] = {}
    for q in qs:
        value = percentile(values, q)
        out[f"p{q:g}"] = None if value is None else round(value, digits)
    return out
