"""Fast checks of the kiosk benchmark's pure parts: seeded traffic and the figures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.kiosk_gateway import render_toml
from bench.kiosk_stats import Prices, RequestResult, p99_floor_s, summarize
from bench.kiosk_targets import evaluate_targets
from bench.kiosk_traffic import TrafficConfig, build_traffic, load_pools, traffic_summary
from bench.percentile import percentile, percentiles

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def test_traffic_is_seeded_and_mixed(routing_data: Path) -> None:
    config = TrafficConfig(seed=11, sessions=300, concurrency=16, dataset_dirs=(routing_data,))
    pools = load_pools(config)
    first, again = build_traffic(config, pools), build_traffic(config, pools)
    assert first == again
    other_config = TrafficConfig(seed=12, sessions=300, concurrency=16, dataset_dirs=(routing_data,))
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


def test_faq_share_zero_means_no_faq(routing_data: Path) -> None:
    config = TrafficConfig(seed=3, sessions=100, faq_share=0.0, dataset_dirs=(routing_data,))
    assert "faq" not in traffic_summary(build_traffic(config))["kinds"]


def _result(route: str | None, ttft: float | None, label: str = "simple", error: str | None = None,
            tokens: tuple[int, int] = (0, 0), kind: str = "simple", reason: str | None = None) -> RequestResult:
    return RequestResult(strategy="x", session=0, kiosk=0, turn=0, kind=kind, label=label,
                         dataset_label=label, lang="en", source="t", route=route, reason=reason,
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
    assert targets["cloud_tokens_cut"]["share_of_best"] == 0.9 and targets["cloud_tokens_cut"]["met"]
    assert not targets["ttft_p99_cut"]["met"]  # no latency model given: no best possible, no verdict
    assert targets["errors"]["met"] and targets["complex_to_edge_share"]["met"] is False  # no complex requests
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


def test_share_of_the_best_possible_cut() -> None:
    from bench.kiosk_targets import relative_target, share_of_best

    assert share_of_best(0.27, 0.30) == 0.9
    assert share_of_best(0.0, 0.30) == 0.0
    assert share_of_best(0.35, 0.30) == 1.1667  # a lucky run can beat the bound (all-cloud's P99 is a sample)
    assert share_of_best(None, 0.3) is None and share_of_best(0.1, None) is None
    assert share_of_best(0.1, 0.0) is None and share_of_best(0.1, -0.05) is None  # nothing to save
    assert relative_target(0.27, 0.30)["met"] is True
    assert relative_target(0.269, 0.30)["met"] is False
    assert relative_target(0.20, 0.30, target=0.6)["met"] is True
    # Nothing to save: met only when the cut reaches the bound itself.
    assert relative_target(-0.02, -0.01)["met"] is False and relative_target(0.0, -0.01)["met"] is True
    assert relative_target(None, 0.3)["met"] is False


def test_shortfalls_name_their_causes() -> None:
    cloud = summarize([_result("cloud", 1.5 + i / 100, tokens=(10, 10)) for i in range(20)], Prices(1, 1), 1.0)
    hybrid_rows = (
        [_result("cache", 0.01, kind="faq") for _ in range(4)]
        + [_result("edge", 0.9) for _ in range(3)]  # slow edge answers: queueing
        + [_result("cloud", 1.5, tokens=(10, 10), reason="classifier:complex:0.70") for _ in range(4)]
        + [_result("cloud", 1.5, tokens=(10, 10), reason="edge-busy") for _ in range(2)]
        + [_result("cloud", 1.5, tokens=(10, 10), kind="repeat", reason="classifier:simple:0.9") for _ in range(1)]
        + [_result("cloud", 1.6, tokens=(10, 10), label="complex", kind="complex") for _ in range(6)]
    )
    hybrid = summarize(hybrid_rows, Prices(1, 1), 1.0)
    simple = hybrid["simple"]
    assert simple["to_cloud"] == 7 and simple["requests"] == 14
    assert simple["left_device_share"] == 0.5
    assert simple["to_cloud_by_cause"] == {"router": 4, "edge-queueing": 2, "cache-miss-on-repeat": 1}
    assert simple["to_cloud_tokens_by_cause"]["router"] == 80
    assert simple["repeats"] == {"requests": 5, "cache_hits": 4, "misses": 1}
    # Without the cache (routed, all-cloud) a repeat sent to the cloud is the router's doing, not a miss.
    bypassed = _result("cloud", 1.5, tokens=(10, 10), kind="repeat", reason="classifier:simple:0.9")
    bypassed.cache = "bypass"
    assert summarize([bypassed], Prices(1, 1), 1.0)["simple"]["to_cloud_by_cause"]["router"] == 1
    targets = evaluate_targets({"all-cloud": cloud, "hybrid": hybrid},
                               {"ttft_p50_s": 1.5, "ttft_p99_s": 4.0, "peak": False}, hybrid_rows)
    median = targets["ttft_p50_cut"]
    assert not median["met"]
    assert median["detail"]["fast"] == 4 and median["detail"]["needed"] == 11
    assert median["detail"]["slow_edge_answers"] == 3
    causes = "\n".join(median["causes"])
    assert "by the router: 4" in causes
    assert "edge was busy (edge queueing): 2" in causes and "cache missed: 1" in causes
    assert "3 edge answers slower than" in causes
    tokens = targets["cloud_tokens_cut"]
    # all-cloud spent every token on simple requests but six of these are complex: best 1.0, reached 0.35.
    assert tokens["best_possible"] == 1.0 and tokens["value"] == 0.35 and tokens["share_of_best"] == 0.35
    assert any("80 cloud tokens" in line for line in tokens["causes"])
    assert targets["errors"]["met"] and "causes" not in targets["errors"]


def test_capacity_ladder_stops_at_the_first_failing_level() -> None:
    from bench.kiosk import KioskOptions
    from bench.kiosk_capacity import max_kiosks, measure_capacity

    def hybrid(p95: float) -> dict:
        rows = [_result("edge", p95) for _ in range(5)] + [_result("cloud", 1.5, tokens=(1, 1))]
        return summarize(rows, Prices(1, 1), 1.0)

    ran: list[int] = []

    def run_level(n: int) -> dict:
        ran.append(n)
        return hybrid(0.5 if n <= 4 else 1.4)

    options = KioskOptions(capacity_levels=[1, 2, 4, 8, 16])
    cap = measure_capacity(options, {1: hybrid(0.2), 8: hybrid(0.9)}, run_level, log=lambda _: None)
    assert ran == [2, 4, 16]  # 1 and 8 come from their shapes; 16 fails and ends the ladder
    assert cap["kiosks"] == 8 and cap["first_failing_level"] == 16 and cap["at_least"] is False
    assert [lv["reused_from_shape"] for lv in cap["levels"]] == [True, False, False, True, False]
    # One generation at a time: slower answers or more edge demand per kiosk mean fewer kiosks.
    assert max_kiosks(0.05, 1.0, 0.1) >= max_kiosks(0.05, 4.0, 0.3) >= 1
    assert max_kiosks(0.05, 0.5, 0.1) == 10**6  # every answer ends within the 1 s bound: no limit from waiting
    assert max_kiosks(0.05, 4.0, 1.2) == 0  # the first token alone is over the bound


def test_baseline_comparison_reads_both_report_schemas(tmp_path: Path) -> None:
    import json

    from bench.kiosk_baseline import format_comparison, load_report

    cloud = summarize([_result("cloud", 1.5, tokens=(10, 10)) for _ in range(10)], Prices(1, 1), 1.0)
    old_hybrid = summarize([_result("cloud", 1.4, tokens=(10, 10)) for _ in range(10)], Prices(1, 1), 1.0)
    new_hybrid = summarize([_result("cache", 0.01) for _ in range(9)] + [_result("cloud", 1.5, tokens=(10, 10))],
                           Prices(1, 1), 1.0)
    old = {"benchmark": "kiosk", "schema": 1, "config": {"concurrency": 8}, "traffic": {"requests": 10},
           "strategies": {"all-cloud": cloud, "hybrid": old_hybrid},
           "targets": evaluate_targets({"all-cloud": cloud, "hybrid": old_hybrid})}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old), encoding="utf-8")
    new = {"benchmark": "kiosk", "schema": 2, "shapes": {"8": {
        "kiosks": 8, "traffic": {"requests": 10}, "strategies": {"all-cloud": cloud, "hybrid": new_hybrid},
        "targets": evaluate_targets({"all-cloud": cloud, "hybrid": new_hybrid})}},
        "strategies": {}, "capacity": {"measured": True, "kiosks": 4, "at_least": False}}
    text = format_comparison(load_report(path), new, "old.json")
    lines = [" ".join(line.split()) for line in text.splitlines()]
    assert "== 8 kiosk(s) on one device" in lines
    assert "hybrid TTFT P50 1.40 s 0.01 s -1.39 s (-99%)" in lines
    assert "hybrid simple requests sent to the cloud 10/10 (100.0%) 1/10 (10.0%) -90.0 pt" in lines
    assert "target cloud_tokens_cut 0.0% NOT MET 90.0% MET +90.0 pt" in lines
    assert "kiosks with edge TTFT P95 < 1 s - 4" in lines


def test_shipped_traffic_is_the_default_and_never_the_classifiers_own_splits() -> None:
    import json

    from bench.curate_traffic import excluded_keys
    from bench.kiosk_traffic import DEFAULT_DATASET_DIR
    from models.intent.dataset import is_dev, text_key

    assert TrafficConfig().dataset_dirs == (DEFAULT_DATASET_DIR,)
    assert DEFAULT_DATASET_DIR.is_relative_to(Path(__file__).resolve().parents[2])
    pools = load_pools(TrafficConfig())
    for pool in (pools.simple, pools.complex, pools.multi):
        assert len(pool["en"]) >= 100 and len(pool["zh"]) >= 80
    excluded = excluded_keys()
    assert excluded  # the threshold split and held-out set were read
    for path in sorted(DEFAULT_DATASET_DIR.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").split("\n"):
            if not line:
                continue
            row = json.loads(line)
            assert text_key(row["text"]) not in excluded, row["text"]
            assert row.get("messages") or is_dev(row["text"])  # single-turn rows: never trained on
    assert (DEFAULT_DATASET_DIR.parent / "README.md").is_file()


def test_shapes_replay_the_same_questions() -> None:
    from bench.kiosk import KioskOptions, plan_shapes

    shapes = plan_shapes(KioskOptions(shapes=[1, 8], duration_s=20))
    assert [s.kiosks for s in shapes] == [8, 1]
    eight, one = shapes
    assert [[t.text for t in s.turns] for s in eight.sessions] == [[t.text for t in s.turns] for s in one.sessions]
    assert {s.kiosk for s in one.sessions} == {0} and "routed" not in one.strategies
    assert max(t.think_s for s in one.sessions for t in s.turns) <= 4 * 0.2


def test_orin_nx_estimate_is_marked_and_uses_the_runs_edge_demand() -> None:
    from bench.kiosk import KioskOptions
    from bench.kiosk_capacity import orin_nx_estimate

    hybrid = summarize([_result("edge", 0.3, tokens=(40, 48)) for _ in range(4)]
                       + [_result("cloud", 1.5, tokens=(40, 48), reason="edge-busy") for _ in range(4)]
                       + [_result("cache", 0.01, kind="faq") for _ in range(8)], Prices(1, 1), 100.0)
    single = summarize([_result("edge", 0.1, tokens=(40, 48)) for _ in range(5)], Prices(1, 1), 10.0)
    shapes = {"8": {"kiosks": 8, "strategies": {"hybrid": hybrid}},
              "1": {"kiosks": 1, "strategies": {"all-edge": single}}}
    est = orin_nx_estimate({"kiosks": 2}, shapes, KioskOptions())
    assert est["estimate"] is True and est["available"] is True
    assert est["edge_answers_per_kiosk_per_s"] == 0.01  # 8 simple requests not from the cache / 8 kiosks / 100 s
    assert est["cases"]["slow"]["answer_s"] > est["cases"]["fast"]["answer_s"]
    assert 1 <= est["cases"]["slow"]["kiosks"] <= est["cases"]["fast"]["kiosks"]
    no_edge = {"8": shapes["8"], "1": {"kiosks": 1, "strategies": {"all-edge": summarize([], Prices(1, 1), 1.0)}}}
    assert orin_nx_estimate({}, no_edge, KioskOptions())["available"] is False


def test_intent_sets_labels_count_as_the_routing_datas(tmp_path: Path) -> None:
    """The held-out intent set (simple/complex labels) can be the traffic, as the routing data (edge/cloud) is."""
    import json

    rows = [{"text": "Where is the pharmacy?", "lang": "en", "label": "simple", "source": "t"},
            {"text": "Prove that sqrt(2) is irrational.", "lang": "en", "label": "complex", "source": "t"},
            {"text": "Which floor is the cinema on?", "lang": "en", "label": "edge", "source": "t"}]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    pools = load_pools(TrafficConfig(dataset_dirs=(tmp_path,)))
    assert sorted(r["text"] for r in pools.simple["en"]) == ["Where is the pharmacy?", "Which floor is the cinema on?"]
    assert [r["text"] for r in pools.complex["en"]] == ["Prove that sqrt(2) is irrational."]


def test_an_intent_set_conversation_opens_with_a_simple_turn(tmp_path: Path) -> None:
    import json

    row = {"messages": [{"role": "user", "content": "Where's the food court?"},
                        {"role": "assistant", "content": "Level 3."},
                        {"role": "user", "content": "Anything halal there?"}],
           "lang": "en", "label": "complex", "source": "heldout_v1"}
    (tmp_path / "conv.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    config = TrafficConfig(dataset_dirs=(tmp_path,), sessions=5, multi_turn_share=1.0, zh_share=0.0)
    turns = [t for s in build_traffic(config) for t in s.turns]
    assert [(t.kind, t.label) for t in turns[:2]] == [("opener", "simple"), ("followup", "complex")]
    assert all(t.dataset_label == "complex" for t in turns)
