"""``bench.intent_models`` runs both models alternately and writes its report (figures never asserted)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from bench.intent_models import main
from models.intent.runtime import DEFAULT_MODEL_DIR, IntentClassifier


def test_smoke_run_writes_both_models(tmp_path: Path, capsys) -> None:
    out = tmp_path / "models.json"
    assert main(["--other", str(DEFAULT_MODEL_DIR), "--requests", "30", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["requests"] == 30
    version = IntentClassifier.load().version
    for name in ("shipped", "other"):
        model = report["models"][name]
        assert model["version"] == version and 0 < model["p50_ms"] <= model["p99_ms"]
    assert report["ratio_shipped_to_other"]["p50"] > 0
    assert "shipped / other" in capsys.readouterr().out


def test_route_overhead_decides_with_the_model_it_is_given(tmp_path: Path) -> None:
    from bench.route_overhead import main as route_overhead

    out = tmp_path / "route.json"
    assert route_overhead(["--requests", "20", "--intent-model-dir", str(DEFAULT_MODEL_DIR), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["intent_model"] == IntentClassifier.load().version


def test_route_overhead_measures_kiosk_traffic_alone_when_asked(tmp_path: Path) -> None:
    """``--long-share 0`` is a kiosk's own stream (no long paste between two questions); the default mix
    alternates the two kinds, as the figures quoted before the flag existed did."""
    from bench.route_overhead import load_texts
    from bench.route_overhead import main as route_overhead

    assert [kind for kind, _ in load_texts(6)] == ["kiosk", "long"] * 3
    assert {kind for kind, _ in load_texts(50, long_share=0.0)} == {"kiosk"}
    out = tmp_path / "route.json"
    assert route_overhead(["--requests", "20", "--long-share", "0", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["long_share"] == 0.0 and report["kiosk"]["total"]["n"] == report["stages"]["total"]["n"] == 20
    assert "long rows" not in report["data"]
    with pytest.raises(SystemExit):
        route_overhead(["--long-share", "1.5", "--out", str(out)])


def test_route_overhead_measures_with_a_cloud_unless_told_otherwise(tmp_path: Path) -> None:
    """By default the gateway has a cloud (never called) and the report says so; ``--no-cloud`` is the
    offline gateway."""
    from bench.route_overhead import main as route_overhead

    out = tmp_path / "route.json"
    assert route_overhead(["--requests", "20", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["cloud"] == "configured, never called"
    assert route_overhead(["--requests", "20", "--no-cloud", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["cloud"] == "none"


def test_route_overhead_can_hold_cores_busy_while_it_measures(tmp_path: Path) -> None:
    """``--busy-cores`` runs busy loops (at ``--busy-nice``) only while it measures, and the report says so;
    a negative count or a nice value out of range is refused."""
    from bench.route_overhead import busy_loops
    from bench.route_overhead import main as route_overhead

    with busy_loops(2, nice=10) as procs:
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
        assert [_settled_nice(p) for p in procs] == [10, 10]
    assert all(p.poll() is not None for p in procs)
    out = tmp_path / "route.json"
    assert route_overhead(["--requests", "20", "--long-share", "0", "--busy-cores", "1", "--busy-nice", "5",
                           "--out", str(out)]) == 0
    assert json.loads(out.read_text())["busy_loops"] == {"cores": 1, "nice": 5}
    for bad in (["--busy-cores", "-1"], ["--busy-cores", "1", "--busy-nice", "20"]):
        with pytest.raises(SystemExit):
            route_overhead([*bad, "--out", str(out)])


def test_route_overhead_can_decide_while_the_edge_model_decodes(tmp_path: Path) -> None:
    """``--decode`` keeps the gateway's own edge model answering while it measures, and reports the decode's
    speed beside the decisions, with the edge model's thread count from ``--edge-threads``."""
    from bench.route_overhead import main as route_overhead

    out = tmp_path / "route.json"
    assert route_overhead(["--requests", "30", "--long-share", "0", "--decode", "--edge-threads", "1",
                           "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["kiosk"]["total"]["n"] == 30 and report["edge_threads"] == 1
    assert report["decode"]["steps"] > 0 and report["decode"]["tokens_per_s"] > 0
    assert route_overhead(["--requests", "10", "--long-share", "0", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["decode"] is None and report["edge_threads"] is None
    with pytest.raises(SystemExit):
        route_overhead(["--decode", "--edge-threads", "0", "--out", str(out)])


def _settled_nice(proc) -> int:
    """The loop's nice value once it has lowered it (its first statement; the interpreter starts first)."""
    for _ in range(100):
        nice = os.getpriority(os.PRIO_PROCESS, proc.pid)
        if nice:
            return nice
        time.sleep(0.02)
    return 0


def test_route_overhead_reports_when_the_backend_that_answers_is_called(tmp_path: Path) -> None:
    """With held-out kiosk rows the encoder decides some requests: ``total`` (until the backend that answers
    is called) is then at most ``decided`` (until the final decision), and ``--early-start route`` makes the
    requests whose route the encoder changes wait for it (figures never asserted, only their order)."""
    from bench.route_overhead import main as route_overhead

    held = str(DEFAULT_MODEL_DIR.parent / "data" / "heldout_v47")
    out = tmp_path / "route.json"
    for mode in ("both", "route"):
        assert route_overhead(["--requests", "300", "--long-share", "0", "--kiosk-dir", held,
                               "--early-start", mode, "--out", str(out)]) == 0
        report = json.loads(out.read_text())
        assert report["early_start_mode"] == mode and "heldout_v47" in report["data"]
        assert report["encoder_share"] > 0
        early = report["early_start"]
        assert early["kept"] > 0
        assert (early["switched"] == 0) == (mode == "both")
        totals, decided = report["stages"]["total"], report["stages"]["decided"]
        assert totals["n"] == decided["n"] == 300 and totals["max_ms"] <= decided["max_ms"]


def test_early_start_bench_sends_each_request_once_per_mode(tmp_path: Path) -> None:
    """``bench.early_start`` through the gateway's own pipeline, tiny: every mode answers every request."""
    from bench.early_start import main as early_start

    out = tmp_path / "early.json"
    assert early_start(["--limit", "3", "--cloud-ttft", "0", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["requests"] == 3
    for mode in ("off", "route", "both"):
        assert report["modes"][mode]["all"]["n"] == 3
    assert report["modes"]["off"]["early_start"] == {"kept": 0, "switched": 0}
    assert report["modes"]["both"]["early_start"]["kept"] == 3
