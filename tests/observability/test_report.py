"""The cost report's numbers for known traffic, through the same argparse commands operators run."""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json

import pytest

from edge import report_cli
from edge.observability import Observability

from .helpers import T0, make_settings
from .traffic import CACHE_N, CLOUD_COST, CLOUD_OK_N, EDGE_N, SAVED_CACHE, SAVED_EDGE, feed


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    parser = argparse.ArgumentParser(prog="edgecloud")
    report_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    return capsys.readouterr().out


@pytest.fixture
def data_dir(tmp_path):
    obs = Observability(make_settings(tmp_path))
    feed(obs)
    feed(obs, t0=T0 + 7200)  # the same traffic two hours later: outside a 1-hour window
    asyncio.run(obs.flush(now=T0 + 86400))
    return tmp_path


def test_report_numbers(data_dir, capsys) -> None:
    out = _cli(["report", "--data-dir", str(data_dir), "--since", "2026-01-01T00:00:00Z",
                "--until", "2026-01-01T01:00:00Z", "--format", "json"], capsys)
    rep = json.loads(out)
    edge, cache, cloud, rejected = (rep["routes"][k] for k in ("edge", "cache", "cloud", "rejected"))
    assert (edge["requests"], edge["prompt_tokens"], edge["completion_tokens"]) == (EDGE_N, 400, 200)
    assert edge["avoided_usd"] == pytest.approx(SAVED_EDGE) and edge["cost_usd"] == 0
    assert cache["requests"] == CACHE_N and cache["avoided_usd"] == pytest.approx(SAVED_CACHE)
    assert (cloud["requests"], cloud["ok"], cloud["errors"]) == (CLOUD_OK_N + 1, CLOUD_OK_N, 1)
    assert cloud["cost_usd"] == pytest.approx(CLOUD_COST)
    assert rejected["requests"] == 1 and rejected["rejected"] == 1
    assert rep["total"]["requests"] == 11
    assert rep["cache_hit_ratio"] == pytest.approx(2 / 9)  # 2 hits; 4 edge + 3 cloud lookups missed
    assert rep["cache_share"] == pytest.approx(2 / 10)
    assert rep["saved_usd"] == pytest.approx(SAVED_EDGE + SAVED_CACHE)
    assert rep["actual_cost_usd"] == pytest.approx(CLOUD_COST)
    assert rep["all_cloud_cost_usd"] == pytest.approx(CLOUD_COST + SAVED_EDGE + SAVED_CACHE)


def test_report_whole_period_and_formats(data_dir, capsys) -> None:
    out = _cli(["report", "--data-dir", str(data_dir), "--since", "all", "--format", "csv"], capsys)
    rows = {r["route"]: r for r in csv.DictReader(io.StringIO(out))}
    assert int(rows["total"]["requests"]) == 22
    assert float(rows["edge"]["avoided_usd"]) == pytest.approx(2 * SAVED_EDGE)
    table = _cli(["report", "--data-dir", str(data_dir), "--since", "all"], capsys)
    assert "cache hit ratio      22.2% of lookups" in table
    assert f"saved                ${2 * (SAVED_EDGE + SAVED_CACHE):.6f}" in table
    assert f"all-cloud would cost ${2 * (SAVED_EDGE + SAVED_CACHE + CLOUD_COST):.6f}" in table


def test_sla_report_cli_and_config(data_dir, tmp_path, capsys) -> None:
    config = tmp_path / "edgecloud.toml"
    config.write_text(
        f'[server]\ndata_dir = "{data_dir}"\n'
        '[metrics.sla.acme]\nttft_p99_s = 1.0\navailability = 0.999\n'
        'exclusions = ["2026-01-01T02:00:00Z/PT1H"]\n'
    )
    out = _cli(["sla", "report", "--config", str(config), "--since", "all", "--provider", "acme",
                "--format", "json"], capsys)
    rep = json.loads(out)
    # Cloud calls: first byte at 1.4 s (> 1 s target) and a 502 -> breach at 00:00; the 02:00 copy is excluded.
    assert [m["verdict"] for m in rep["minutes"]] == ["breach", "excluded"]
    (breach,) = rep["breaches"]
    assert breach["start"] == "2026-01-01T00:00:00Z" and breach["kinds"] == ["ttft_p99", "availability"]
    assert breach["requests"] == 5 and breach["unavailable"] == 1 and breach["failed_ids"] == ["cloud-err"]
    table = _cli(["sla", "report", "--config", str(config), "--since", "all", "--provider", "acme"], capsys)
    assert "Breaches: 1" in table


def test_since_parsing() -> None:
    now = T0 + 86400
    assert report_cli.parse_since("24h", now) == T0
    assert report_cli.parse_since("30m", now) == now - 1800
    assert report_cli.parse_since("7d", now) == now - 7 * 86400
    assert report_cli.parse_since("2026-01-01T00:00:00Z", now) == T0
    assert report_cli.parse_since("all", now) == 0.0
    with pytest.raises(argparse.ArgumentTypeError):
        report_cli.parse_since("yesterday", now)
