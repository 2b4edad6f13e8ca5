"""Fast checks of the kiosk benchmark's pure parts: seeded traffic and the figures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.kiosk_gateway import render_toml
from bench.kiosk_stats import Prices, RequestResult, evaluate_targets, p99_floor_s, summarize
from bench.kiosk_traffic import TrafficConfig, build_traffic, load_pools, traffic_summary
from bench.percentile import percentile, percentiles

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def test_traffic_is_seeded_and_mixed(shared_routing: Path) -> None:
    config = TrafficConfig(seed=11, sessions=300, concurrency=16, dataset_dir=shared_routing)
    pools = load_pools(config)
    first, again = build_traffic(config, pools), build_traffic(config, pools)
    assert first == again
    other_config = TrafficConfig(seed=12, sessions=300, concurrency=16, dataset_dir=shared_routing)
    other = build_traffic(other_config, pools)
    assert other != first
    summary = traffic_summary(first)
    assert {"faq", "simple", "complex", "followup", "opener"} <= set(summary["kinds"])
    assert set(summary["langs"]) == {"en", "zh"}
    single = sum(summary["kinds"][k] for k in ("faq", "simple", "complex", "repeat"))
    faq_share = summary["kinds"]["faq"] / single
    assert 0.2 < faq_share < 0.4
    assert {s.kiosk for s in first} == set(range(16))
    for session in first:
        if any(t.followup for t in session.turns):
            assert not session.turns[0].followup and all(t.label == "complex" for t in session.turns[1:])


def test_faq_share_zero_means_no_faq(shared_routing: Path) -> None:
    config = TrafficConfig(seed=3, sessions=100, faq_share=0.0, dataset_dir=shared_routing)
    assert "faq" not in traffic_summary(build_traffic(config))["kinds"]


def _result(route: str | None, ttft: float | None, label: str = "simple", error: str | None = None,
            tokens: tuple[int, int] = (0, 0)) -> RequestResult:
    return RequestResult(strategy="x", session=0, kiosk=0, turn=0, kind="simple", label=label,
                         dataset_label=label, lang="en", source="t", route=route,
                         status=200 if error is None else 503,
                         ttft_s=ttft, total_s=None if ttft is None else ttft + 0.5, error=error,
                         prompt_tokens=tokens[0], completion_tokens=tokens[1])


def test_summary_counts_and_cost() -> None:
    results = [
        _result("cloud", 1.0, "complex", tokens=(100, 20)),
        _result("edge", 0.2, "complex"),
        _result("cache", 0.01),
        _result(None, None, error="503:edge_overloaded"),
    ]
    s = summarize(results, Prices(1.0, 2.0), wall_s=2.0)
    assert (s["requests"], s["ok"], s["errors"]) == (4, 3, 1)
    assert s["routes"] == {"edge": 1, "cloud": 1, "cache": 1}
    assert s["error_codes"] == {"503:edge_overloaded": 1}
    assert s["cloud_tokens"] == {"prompt": 100, "completion": 20, "total": 120}
    assert abs(s["cloud_cost_usd"] - (100 * 1.0 + 20 * 2.0) / 1e6) < 1e-12
    assert s["complex"]["to_edge"] == 1 and s["complex"]["requests"] == 2
    assert s["per_route"]["edge"]["count"] == 1 and s["overall"]["count"] == 3


def test_percentiles_are_ordered_and_empty_is_none() -> None:
    p = percentiles([5.0, 0.1, 3.0, 2.0, 9.0, 0.4])
    assert p["p50"] <= p["p95"] <= p["p99"] <= 9.0
    assert percentiles([]) == {"p50": None, "p95": None, "p99": None}


def test_bench_percentile_is_numpys_linear() -> None:
    """The benchmarks' one convention: numpy's default (linear, Hyndman and Fan type 7)."""
    import numpy as np

    rng = np.random.default_rng(5)
    for n in (1, 2, 7, 100, 1001):
        values = rng.lognormal(0, 1, n).tolist()
        for q in (0, 2.5, 50, 90, 95, 97.5, 99, 100):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_targets_compare_hybrid_with_all_cloud() -> None:
    cloud = summarize([_result("cloud", 1.5, tokens=(10, 10)) for _ in range(10)], Prices(1, 1), 1.0)
    hybrid = summarize([_result("cache", 0.01) for _ in range(9)] + [_result("cloud", 1.5, tokens=(10, 10))],
                       Prices(1, 1), 1.0)
    targets = evaluate_targets({"all-cloud": cloud, "hybrid": hybrid})
    assert targets["ttft_p50_cut"]["met"] and targets["cloud_tokens_cut"]["value"] == 0.9
    assert targets["cloud_tokens_cut"]["best_possible"] == 1.0  # every all-cloud token was a simple request
    assert not targets["ttft_p99_cut"]["met"]  # the one cloud answer still sets the P99
    assert evaluate_targets({"hybrid": hybrid})["evaluated"] is False


def test_p99_floor_follows_the_share_that_must_go_to_the_cloud() -> None:
    # With 1% or less on the cloud, the P99 can come from the fast answers alone.
    assert p99_floor_s(0.01, 1.5, 4.0) == 0.0
    # Everything on the cloud: the floor is the cloud's own P99; half of it: the cloud's P98.
    assert abs(p99_floor_s(1.0, 1.5, 4.0) - 4.0) < 1e-9
    assert 3.3 < p99_floor_s(0.5, 1.5, 4.0) < 4.0
    # The issue's -60% P99 target (from ~3.8 s to ~1.52 s) needs about 2% or less of requests on the cloud.
    assert p99_floor_s(0.02, 1.5, 4.0) < 1.52 < p99_floor_s(0.03, 1.5, 4.0)
    assert p99_floor_s(0.3, 1.5, 4.0, peak=True) > p99_floor_s(0.3, 1.5, 4.0)


def test_targets_report_the_best_possible_p99_cut() -> None:
    cloud = summarize([_result("cloud", 1.0 + i / 10, tokens=(10, 10)) for i in range(30)], Prices(1, 1), 1.0)
    hybrid = summarize([_result("cache", 0.01) for _ in range(20)]
                       + [_result("cloud", 1.5, tokens=(10, 10), label="complex") for _ in range(10)],
                       Prices(1, 1), 1.0)
    targets = evaluate_targets({"all-cloud": cloud, "hybrid": hybrid},
                               {"ttft_p50_s": 1.5, "ttft_p99_s": 4.0, "peak": False})
    best = targets["ttft_p99_cut"]["best_possible"]
    floor = p99_floor_s(10 / 30, 1.5, 4.0)
    assert abs(best - round(1 - floor / cloud["overall"]["ttft_s"]["p99"], 4)) < 1e-9


def test_render_toml_round_trips() -> None:
    tree = {"server": {"port": 1, "data_dir": "/tmp/x y"},
            "cache": {"faq_paths": ["/a.json"], "enabled": True},
            "cloud": {"warmup": False, "providers": [{"name": "fake", "base_url": "http://127.0.0.1:9/v1"}]}}
    assert tomllib.loads(render_toml(tree)) == tree
