"""The scale test's machinery, end to end but tiny: one uvicorn worker via the factory import string.

Checks that ``uvicorn --workers N --factory bench.scale_app:create`` builds a working gateway from the
environment, that cache-load answers really come from the cache (no misses), and that the report is
consistent. No speed is asserted: the machine is shared.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.scale import ScaleOptions, run_scale_benchmark


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_scale_quick_one_worker(tmp_path: Path, embedded_model: Path, routing_data: Path) -> None:
    options = ScaleOptions(workers=[1], concurrency=[2], duration_s=1.5, warmup_s=0.3, out_dir=tmp_path,
                           p99_bound_ms=10_000.0)
    lines: list[str] = []
    report = run_scale_benchmark(options, log=lines.append)
    on_disk = json.loads((tmp_path / "scale.json").read_text(encoding="utf-8"))
    assert on_disk["workers"].keys() == {"1"}
    assert report["machine"]["nproc"] >= 1
    for target in ("cache", "route"):
        figures = on_disk["workers"]["1"][target]
        (level,) = figures["levels"]
        assert level["requests"] > 0 and not level["errors"]
        assert level["misses"] == 0  # every cache-load answer carried x-edgecloud-route: cache
        lat = level["latency_ms"]
        assert lat["p50"] <= lat["p95"] <= lat["p99"]
        assert level["meets_bound"] is True
        assert figures["sustained_requests_per_s"] == level["requests_per_s"]
    assert any("sustained" in line for line in lines)
