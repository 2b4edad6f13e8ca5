"""SLA windows from a known series: a latency breach, an availability breach, an exclusion window."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from edge.config import SlaTarget
from edge.observability import Observability
from edge.observability.sla import MinuteRow, evaluate, excluded, parse_window, percentile
from edge.observability.store import MinuteStore, StoredRow
from edge.observability.web import dashboard_data
from edge.report_cli import render_sla, sla_report_data

from .helpers import T0, call, make_settings, record

SLA = {"acme": {"ttft_p99_s": 1.0, "availability": 0.99, "exclusions": ["2026-01-01T00:03:00Z/PT2M"]}}


def _minute_of_calls(obs: Observability, minute: int, *, slow: int = 0, failed: int = 0, n: int = 100) -> None:
    """``n`` upstream attempts in minute ``minute``: ``slow`` with a 2 s first byte, ``failed`` with 503."""
    for i in range(n):
        rid = f"m{minute}-{i:03d}"
        bad = i < failed
        fb = 2000.0 if i >= n - slow else 100.0 + i
        obs.observe_cloud_call(
            call(ok=not bad, status=503 if bad else 200, kind="server_error" if bad else None,
                 first_byte=fb, total=fb + 500, rid=rid),
            at=T0 + minute * 60 + 1 + i * 0.5,
        )


def _known_series(tmp_path: Path) -> Observability:
    obs = Observability(make_settings(tmp_path, sla=SLA))
    _minute_of_calls(obs, 0)                      # fine
    _minute_of_calls(obs, 1, slow=2)              # 2 of 100 slow: the 99th value is slow -> P99 breach
    _minute_of_calls(obs, 2, failed=2)            # 98% available < 99% -> availability breach
    _minute_of_calls(obs, 3, slow=100)            # maintenance window: excluded
    _minute_of_calls(obs, 4, failed=100)          # maintenance window: excluded
    _minute_of_calls(obs, 5, slow=1)              # 1 of 100 slow: P99 is the 99th value -> fine
    asyncio.run(obs.flush(now=T0 + 3600))
    return obs


def test_nearest_rank_percentile() -> None:
    values = sorted(float(v) for v in range(1, 101))
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 99) is None


def test_exclusion_windows() -> None:
    start, end = parse_window("2026-01-01T00:03:00Z/PT2M")
    assert (start, end) == (T0 + 180, T0 + 300)
    assert parse_window("2026-01-01T00:03:00Z/2026-01-01T00:05:00Z") == (start, end)
    assert parse_window("2026-01-01T00:03:00/PT2M") == (start, end)  # no zone: UTC
    assert excluded(int(T0 + 180), [(start, end)]) and excluded(int(T0 + 240), [(start, end)])
    assert not excluded(int(T0 + 300), [(start, end)]) and not excluded(int(T0 + 120), [(start, end)])
    for bad in ("2026-01-01T00:03:00Z", "2026-01-01T00:05:00Z/2026-01-01T00:03:00Z", "2026-01-01/P"):
        with pytest.raises(ValueError):
            parse_window(bad)


def test_known_series_breaches_and_exclusions(tmp_path: Path) -> None:
    obs = _known_series(tmp_path)
    data = sla_report_data(obs.settings, since=T0, until=T0 + 3600, provider="acme")
    verdicts = [(m["start"][11:16], m["verdict"]) for m in data["minutes"]]
    assert verdicts == [
        ("00:00", "ok"), ("00:01", "breach"), ("00:02", "breach"),
        ("00:03", "excluded"), ("00:04", "excluded"), ("00:05", "ok"),
    ]
    b1, b2 = data["breaches"]
    assert (b1["start"], b1["end"], b1["kinds"]) == ("2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z", ["ttft_p99"])
    assert b1["ttft_p99_ms"] == 2000.0 and b1["target_ttft_p99_ms"] == 1000.0 and b1["requests"] == 100
    assert set(b1["slowest_ids"][:2]) == {"m1-098", "m1-099"}  # the slowest requests, as evidence
    assert b2["kinds"] == ["availability"] and b2["availability"] == pytest.approx(0.98)
    assert b2["unavailable"] == 2 and b2["failed_ids"] == ["m2-000", "m2-001"]
    (summary,) = data["summary"]
    # The period's P99 over every counted request (minutes 0, 1, 2 and 5), from the merged sketches.
    counted = sorted([100.0 + i for i in range(100)] * 2 + [100.0 + i for i in range(98)] + [2000.0] * 2
                     + [100.0 + i for i in range(99)] + [2000.0])
    assert summary == {
        "scope": "provider", "name": "acme", "minutes": 4, "excluded_minutes": 2, "breached_minutes": 2,
        "requests": 400, "unavailable": 2, "availability": pytest.approx(0.995),
        "ttft_p50_ms": pytest.approx(percentile(counted, 50), rel=0.01),
        "ttft_p95_ms": pytest.approx(percentile(counted, 95), rel=0.01),
        "ttft_p99_ms": pytest.approx(percentile(counted, 99), rel=0.01),
        "relative_error": 0.01,
    }
    assert data["quantiles"]["relative_error"] == 0.01
    # The metrics and the dashboard saw the same two breaches when the minutes were rolled up.
    assert [b.minute for b in obs.monitor.recent_breaches] == [T0 + 60, T0 + 120]
    assert {tuple(b["kinds"]) for b in dashboard_data(obs)["breaches"]} == {("ttft_p99",), ("availability",)}
    text = render_sla(data, "table")
    assert "2026-01-01T00:01:00Z .. 2026-01-01T00:02:00Z  provider acme: ttft_p99" in text
    assert "examples: m2-000 m2-001" in text
    assert "each is within 1% of the exact value" in text  # the report states its error
    csv_lines = render_sla(data, "csv").splitlines()
    assert csv_lines[0].startswith("start,end,scope,name,verdict,breach_kinds,requests")
    assert len(csv_lines) == 7 and ",breach,availability,100," in csv_lines[3]
    assert json.loads(render_sla(data, "json"))["breaches"][0]["minute"] == T0 + 60


def test_targets_changed_after_the_fact_apply_to_stored_minutes(tmp_path: Path) -> None:
    obs = _known_series(tmp_path)
    relaxed = obs.settings.model_copy(deep=True)
    relaxed.metrics.sla = {"acme": SlaTarget(ttft_p99_s=5.0, availability=0.95)}
    data = sla_report_data(relaxed, since=T0, until=T0 + 3600, provider="acme")
    # Looser targets and no maintenance window: only the minute where every call failed breaks it.
    assert [m["verdict"] for m in data["minutes"]] == ["ok", "ok", "ok", "ok", "breach", "ok"]
    assert [(b["start"], b["kinds"]) for b in data["breaches"]] == [("2026-01-01T00:04:00Z", ["availability"])]


def test_route_rows_and_route_targets(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, sla={"route:edge": {"ttft_p99_s": 0.5, "availability": 0.999}})
    obs = Observability(settings)
    for i in range(10):
        obs.observe_request(record(f"e{i}", T0 + i, "edge", ttft_ms=800.0 if i == 9 else 100.0, total_ms=900.0))
    obs.observe_request(record("c0", T0 + 1, "cloud", provider="acme", ttft_ms=300.0, total_ms=400.0))
    obs.observe_request(record("c1", T0 + 2, "cloud", provider="acme", outcome="error", status=504,
                               error_code="upstream_timeout", total_ms=8000.0))
    obs.observe_request(record("r0", T0 + 3, "", outcome="rejected", status=400, error_code="invalid_value"))
    rows = {(r.scope, r.name): r for r in asyncio.run(obs.flush(now=T0 + 3600))}
    assert set(rows) == {("route", "edge"), ("route", "cloud"), ("provider", "acme")}  # rejected: no route
    edge = rows[("route", "edge")]
    # Percentiles come from the sketch: within 1% (the maximum, here the P99, is exact).
    assert (edge.requests, edge.ttft_p99_ms, edge.total_p99_ms) == (10, 800.0, 900.0)
    assert edge.ttft_p50_ms == pytest.approx(100.0, rel=0.01)
    cloud = rows[("route", "cloud")]
    assert (cloud.requests, cloud.errors, cloud.unavailable, cloud.availability) == (2, 1, 1, 0.5)
    assert cloud.failed_ids == ["c1"]
    data = sla_report_data(settings, since=T0, until=T0 + 3600, scope="route")
    verdicts = {m["name"]: m["verdict"] for m in data["minutes"]}
    assert verdicts == {"edge": "breach", "cloud": "no-target"}


def test_minutes_survive_a_restart_and_merge(tmp_path: Path) -> None:
    first = Observability(make_settings(tmp_path))
    first.observe_request(record("a", T0 + 1, "edge", ttft_ms=100.0, total_ms=200.0, prompt_tokens=10))
    asyncio.run(first.flush(now=T0 + 30, final=True))  # shutdown mid-minute writes the partial minute
    second = Observability(make_settings(tmp_path))
    second.observe_request(record("b", T0 + 40, "edge", ttft_ms=300.0, total_ms=400.0, prompt_tokens=5))
    asyncio.run(second.flush(now=T0 + 3600))
    store = second.store
    (row,) = [MinuteRow.from_dict(r.data) for r in store.query(kinds=("route",))]
    assert (row.requests, row.ttft_p99_ms) == (2, 300.0) and row.ttft_p50_ms == pytest.approx(100.0, rel=0.01)
    (usage,) = store.query(kinds=("usage",))
    assert usage.data["requests"] == 2 and usage.data["prompt_tokens"] == 15


def test_store_retention_and_size_bound(tmp_path: Path) -> None:
    store = MinuteStore(tmp_path, retention_days=1, max_bytes=64 * 1024)
    now = T0 + 10 * 86400
    old = [StoredRow(int(T0), "usage", "edge", {"requests": 1})]
    store.write(old)
    filler = "x" * 400
    rows = [StoredRow(int(now - 3600 + 60 * i), "usage", "edge", {"requests": i, "pad": filler})
            for i in range(50)]
    rows += [StoredRow(int(now - 80000 + 60 * i), "route", f"r{j}", {"pad": filler * 4})
             for i in range(60) for j in range(3)]
    store.write(rows)
    assert store.size_bytes() > 64 * 1024
    store.prune(now)
    assert store.size_bytes() <= 64 * 1024
    kept = store.query(kinds=("usage",))
    assert kept and kept[-1].data["requests"] == 49  # the newest minutes survive
    assert all(r.minute > T0 for r in store.query())  # past retention: gone


def test_evaluate_min_requests_and_default_target() -> None:
    row = MinuteRow.build(minute=int(T0), scope="provider", name="other", requests=1, errors=1, unavailable=1,
                          rate_limited=0, ttft=[], total=[], slowest_ids=[], failed_ids=["x"])
    result = evaluate([row], {}, SlaTarget())
    assert [v for _, v in result.minutes] == ["breach"]  # no target for "other": the default applies
    result = evaluate([row], {"*": SlaTarget(min_requests=5)}, SlaTarget())
    assert [v for _, v in result.minutes] == ["too-few"]


def test_rows_wait_in_memory_while_the_disk_refuses_writes(tmp_path: Path, monkeypatch) -> None:
    """A full disk cannot be made here, so the store's write fails once by hand."""
    obs = Observability(make_settings(tmp_path))
    obs.observe_request(record("a", T0 + 1, "edge", ttft_ms=100.0, total_ms=200.0))
    real_write = obs.store.write
    calls = []

    def failing_write(rows, merge=None):
        calls.append(len(rows))
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return real_write(rows, merge)

    monkeypatch.setattr(obs.store, "write", failing_write)
    asyncio.run(obs.flush(now=T0 + 120))
    assert obs.store.query() == [] and len(obs._pending) == 2  # route row + usage row kept
    obs.observe_request(record("b", T0 + 130, "edge", ttft_ms=300.0, total_ms=400.0))
    asyncio.run(obs.flush(now=T0 + 3600))
    assert calls == [2, 4] and obs._pending == []
    assert sorted(r.minute for r in obs.store.query(kinds=("route",))) == [T0, T0 + 120]


def test_the_last_hour_is_back_on_the_dashboard_after_a_restart(tmp_path: Path) -> None:
    import time

    now = time.time()
    first = Observability(make_settings(tmp_path))
    first.observe_request(record("old", now - 600, "edge", ttft_ms=120.0, total_ms=300.0))
    asyncio.run(first.flush(now=now))
    second = Observability(make_settings(tmp_path))

    async def run() -> dict:
        await second.start()
        try:
            return dashboard_data(second)
        finally:
            await second.aclose()

    data = asyncio.run(run())
    (point,) = data["ttft"]["edge"]
    assert point["requests"] == 1 and point["p99"] == 120.0


def test_a_malformed_exclusion_window_is_reported_not_raised(tmp_path: Path, capsys) -> None:
    import argparse

    from edge import report_cli

    config = tmp_path / "bad.toml"
    config.write_text(f'[server]\ndata_dir = "{tmp_path}"\n[metrics.sla.acme]\nexclusions = ["tomorrow"]\n')
    _known_series(tmp_path)
    parser = argparse.ArgumentParser()
    report_cli.register(parser.add_subparsers())
    args = parser.parse_args(["sla", "report", "--config", str(config), "--since", "all"])
    assert args.func(args) == 2
    assert "exclusion window" in capsys.readouterr().err
