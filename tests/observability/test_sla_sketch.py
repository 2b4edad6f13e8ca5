"""The SLA sketch against the exact nearest-rank quantile, on a quiet and on a busy gateway."""

from __future__ import annotations

import json
import random

import pytest

from edge.observability.sketch import RELATIVE_ERROR, LatencySketch
from edge.observability.sla import MinuteBucket, MinuteRow, percentile, rollup

QS = (50, 90, 95, 99, 99.9, 100)


def _latencies(n: int, seed: int) -> list[float]:
    """A kiosk-like mix: most first tokens fast, a heavy tail of slow cloud answers."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        base = rng.lognormvariate(5.0, 0.5)  # ~150 ms
        out.append(base * (rng.uniform(5, 40) if rng.random() < 0.03 else 1.0))
    return out


def _minute(values: list[float]) -> MinuteRow:
    bucket = MinuteBucket()
    for i, v in enumerate(values):
        bucket.add(request_id=f"r{i}", ttft_ms=v, total_ms=v * 2, error=False, unavailable=False)
    return bucket.rollup(0, "route", "edge")


def _assert_close(sketch_value: float | None, exact: float | None) -> None:
    assert sketch_value is not None and exact is not None
    # The row rounds to 0.1 ms; the sketch itself is within RELATIVE_ERROR of the exact value.
    assert abs(sketch_value - exact) <= RELATIVE_ERROR * exact + 0.05, (sketch_value, exact)


@pytest.mark.parametrize("per_minute", [100, 100_000])
def test_minute_quantiles_within_the_stated_error(per_minute: int) -> None:
    values = _latencies(per_minute, seed=per_minute)
    exact = sorted(values)
    row = _minute(values)
    assert row.requests == per_minute
    _assert_close(row.ttft_p50_ms, percentile(exact, 50))
    _assert_close(row.ttft_p95_ms, percentile(exact, 95))
    _assert_close(row.ttft_p99_ms, percentile(exact, 99))
    ttft, total = row.sketches()
    assert ttft.count == total.count == per_minute  # every request counted, none sampled away
    for q in QS:
        _assert_close(ttft.quantile(q), percentile(exact, q))
    assert ttft.quantile(100) == max(values)  # clamped to the exact maximum


def test_unequal_parts_merge_to_the_sketch_of_the_whole() -> None:
    """A minute split by a restart (1,000 then 99,000 requests) and a period roll-up weigh every request once."""
    values = _latencies(100_000, seed=7)
    small, big = _minute(values[:1000]), _minute(values[1000:])
    merged = small.merge(big)
    whole = _minute(values)
    assert merged.requests == 100_000
    assert merged.ttft_sketch == whole.ttft_sketch
    assert merged.ttft_p99_ms == whole.ttft_p99_ms
    # A period: ten minutes of very unequal traffic; the roll-up's P99 is the P99 of all requests.
    rng = random.Random(3)
    minutes = [_latencies(rng.choice([10, 100, 20_000]), seed=i) for i in range(10)]
    ttft, _ = rollup(_minute(m) for m in minutes)
    everything = sorted(v for m in minutes for v in m)
    for q in (50, 99):
        _assert_close(ttft.quantile(q), percentile(everything, q))


def test_sketch_round_trips_through_json_and_reads_old_rows() -> None:
    values = _latencies(500, seed=1)
    row = _minute(values)
    again = MinuteRow.from_dict(json.loads(json.dumps(row.to_dict())))
    assert again == row
    old = row.to_dict(samples=False)  # a row as written before sketches: raw samples
    old["ttft_samples"] = sorted(values)
    old["total_samples"] = sorted(v * 2 for v in values)
    legacy = MinuteRow.from_dict(old)
    assert legacy.sketches()[0].count == 500
    assert legacy.merge(row).ttft_p99_ms == _minute(values + values).ttft_p99_ms


def test_empty_zero_and_single_values() -> None:
    empty = LatencySketch()
    assert empty.quantile(99) is None
    one = LatencySketch.of([123.4])
    assert one.quantile(50) == one.quantile(99) == 123.4
    zeros = LatencySketch.of([0.0, 0.0, 5.0])
    assert zeros.quantile(50) == 0.0 and zeros.quantile(100) == 5.0
    with pytest.raises(ValueError):
        LatencySketch(0.02).merge(LatencySketch(0.01))
