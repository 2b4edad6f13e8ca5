"""The kiosk benchmark's quick mode, end to end: real gateway subprocess, embedded model, fake cloud.

What is checked is the report's structure and internal consistency (every strategy present, counts
that add up, percentiles in order, the forced strategies really forced, the PNG written), never a
speed: the machine is shared and a timing assertion would only measure the neighbours.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.kiosk import KioskOptions, run_kiosk_benchmark
from bench.kiosk_baseline import format_comparison, load_report
from bench.kiosk_client import STRATEGIES

STRATEGY_NAMES = [s.name for s in STRATEGIES]


def _ordered(block: dict[str, Any]) -> bool:
    values = [block["p50"], block["p95"], block["p99"]]
    return all(v is not None for v in values) and values == sorted(values)


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory: pytest.TempPathFactory, embedded_model: Path,
                 routing_data: Path) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("kiosk-quick")
    lines: list[str] = []
    report = run_kiosk_benchmark(KioskOptions.quick_defaults(out_dir=out), log=lines.append)
    report["_log"] = lines
    return report


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_report_files_and_structure(quick_report: dict[str, Any]) -> None:
    files = quick_report["files"]
    on_disk = json.loads(Path(files["json"]).read_text(encoding="utf-8"))
    assert on_disk["strategies"].keys() == quick_report["strategies"].keys()
    assert list(quick_report["strategies"]) == STRATEGY_NAMES
    png = Path(files["png"]).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    for key in ("nproc", "cpu_model", "ram_gib"):
        assert quick_report["machine"][key]
    assert quick_report["config"]["quick"] is True
    # Only the edge-only strategy may be cut by the time cap (a busy machine slows the edge, not the cloud).
    assert all(done for name, done in quick_report["complete"].items() if name != "all-edge")
    rows = [json.loads(line) for line in Path(files["requests"]).read_text(encoding="utf-8").splitlines()]
    per_strategy = quick_report["traffic"]["requests"]
    assert quick_report["headline_kiosks"] == 4
    rows = [r for r in rows if r["kiosks"] == 4]
    assert len(rows) == sum(s["requests"] for s in quick_report["strategies"].values())
    assert all(s["requests"] == per_strategy for s in quick_report["strategies"].values() if s["complete"])
    # The same traffic for every strategy: identical (session, turn, kind) sequences.
    sequences = {name: [(r["session"], r["turn"], r["kind"]) for r in rows if r["strategy"] == name]
                 for name in STRATEGY_NAMES}
    assert all(seq == sequences["all-cloud"] for name, seq in sequences.items()
               if quick_report["complete"][name])
    assert all(set(seq) <= set(sequences["all-cloud"]) for seq in sequences.values())
    # Nothing secret leaks into the report (the admin token lives only in the deleted data dir).
    assert "admin_token" not in Path(files["json"]).read_text(encoding="utf-8")
    assert "targets (hybrid vs all-cloud):" in "\n".join(quick_report["_log"])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_report_numbers_are_consistent(quick_report: dict[str, Any]) -> None:
    requests = quick_report["traffic"]["requests"]
    for name, s in quick_report["strategies"].items():
        assert s["requests"] == requests if s["complete"] else s["requests"] <= requests, name
        assert s["ok"] + s["errors"] == s["requests"], name
        assert sum(s["routes"].values()) == s["ok"], name
        assert sum(s["error_codes"].values()) == s["errors"], name
        assert sum(k["requests"] for k in s["by_kind"].values()) == s["requests"], name
        assert s["overall"]["count"] == s["ok"], name
        assert sum(b["count"] for b in s["per_route"].values()) == s["ok"], name
        assert s["ok"] > 0, name
        assert _ordered(s["overall"]["ttft_s"]), name
        assert _ordered(s["overall"]["total_s"]), name
        for route, block in s["per_route"].items():
            if block["count"]:
                assert _ordered(block["ttft_s"]) and _ordered(block["total_s"]), (name, route)
                assert block["ttft_s"]["p50"] <= block["total_s"]["p99"] + 1e-9, (name, route)
        tokens = s["cloud_tokens"]
        assert tokens["total"] == tokens["prompt"] + tokens["completion"]
        assert (s["cloud_cost_usd"] > 0) == (tokens["total"] > 0), name
        cx = s["complex"]
        assert 0 <= cx["to_edge"] <= cx["requests"] and 0 <= cx["strict_to_edge"] <= cx["strict_requests"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_strategies_do_what_they_say(quick_report: dict[str, Any]) -> None:
    s = quick_report["strategies"]
    assert s["all-cloud"]["routes"]["edge"] == 0 and s["all-cloud"]["routes"]["cache"] == 0
    assert s["all-edge"]["routes"]["cloud"] == 0 and s["all-edge"]["routes"]["cache"] == 0
    assert s["all-edge"]["cloud_tokens"]["total"] == 0
    assert s["all-edge"]["cloud_counters"]["chat_attempts"] == 0
    assert s["routed"]["routes"]["cache"] == 0
    # The cache is purged before the hybrid run, and the FAQ pack survives the purge: FAQ turns hit.
    faq_turns = quick_report["traffic"]["kinds"].get("faq", 0)
    assert faq_turns > 0
    assert s["hybrid"]["routes"]["cache"] >= faq_turns
    assert s["hybrid"]["cloud_tokens"]["total"] < s["all-cloud"]["cloud_tokens"]["total"]
    targets = quick_report["targets"]
    assert targets["evaluated"] is True
    for name in ("ttft_p50_cut", "ttft_p99_cut", "cloud_tokens_cut", "complex_to_edge_share"):
        assert isinstance(targets[name]["met"], bool)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_two_shapes_capacity_and_baseline(quick_report: dict[str, Any]) -> None:
    shapes = quick_report["shapes"]
    assert list(shapes) == ["4", "1"]
    one = shapes["1"]
    assert list(one["strategies"]) == ["all-cloud", "hybrid"]
    # The same questions in both shapes: the one-kiosk shape replays the four-kiosk shape's sessions.
    assert one["traffic"]["requests"] == shapes["4"]["traffic"]["requests"]
    assert one["traffic"]["kinds"] == shapes["4"]["traffic"]["kinds"]
    for shape in shapes.values():
        assert shape["targets"]["evaluated"] is True
        for name in ("ttft_p99_cut", "cloud_tokens_cut"):
            assert "share_of_best" in shape["targets"][name] and "best_possible" in shape["targets"][name]
        simple = shape["strategies"]["hybrid"]["simple"]
        assert sum(simple["routes"].values()) == simple["requests"]
        assert simple["to_cloud"] == sum(simple["to_cloud_by_cause"].values())
    cap = quick_report["capacity"]
    assert cap["measured"] is True and cap["levels"][0]["kiosks"] == 1 and cap["levels"][0]["reused_from_shape"]
    # The ladder stops at the first failing level (on a busy machine that can be the first).
    passed = [lv["passes"] for lv in cap["levels"]]
    assert passed == [True] * (len(passed) - 1) + [passed[-1]]
    if passed[0]:
        assert cap["levels"][1]["kiosks"] == 4 and cap["levels"][1]["reused_from_shape"]
    assert cap["kiosks"] == (cap["levels"][-1]["kiosks"] if passed[-1] else
                             ([lv["kiosks"] for lv in cap["levels"][:-1]] or [0])[-1])
    log = "\n".join(quick_report["_log"])
    assert "== 1 kiosk(s) on one device" in log and "capacity (" in log
    assert "simple requests sent to the cloud:" in log
    # The report compares with itself: every figure beside its twin, no change.
    text = format_comparison(load_report(Path(quick_report["files"]["json"])), quick_report)
    assert "== 4 kiosk(s) on one device" in text and "== 1 kiosk(s) on one device" in text
    assert "hybrid TTFT P50" in text and "== capacity" in text
