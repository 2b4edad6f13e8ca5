"""The edge benchmark's paired ratio: per-prompt ratios, their median, a bootstrap interval."""

from __future__ import annotations

from bench.edge_overhead import paired_ratio


def test_equal_targets_give_one_with_a_tight_interval() -> None:
    same = [100.0, 110.0, 95.0, 120.0] * 5
    result = paired_ratio(same, same)
    assert result == {"median": 1.0, "ci95": [1.0, 1.0], "n": 20}


def test_prompts_without_a_figure_are_left_out_of_the_pairs() -> None:
    result = paired_ratio([1.0, None, 2.0, 4.0], [2.0, 3.0, None, 4.0])
    assert result["n"] == 2 and result["median"] == 0.75


def test_a_steady_lead_shows_as_an_interval_above_one() -> None:
    theirs = [float(v) for v in range(80, 120)]
    ours = [v * 1.05 + (1 if i % 2 else -1) for i, v in enumerate(theirs)]  # 5% faster, with noise
    result = paired_ratio(ours, theirs)
    assert 1.0 < result["ci95"][0] <= result["median"] <= result["ci95"][1]


def test_no_pairs_at_all() -> None:
    assert paired_ratio([None], [1.0]) == {"median": None, "ci95": [None, None], "n": 0}


def test_concurrency_summary_quantiles_are_ordered() -> None:
    """P99 of the waves' TTFTs is at least their median (the percentile helper takes 0..100)."""
    from bench.edge_concurrency import summarize

    streams = [{"ttft_ms": float(v), "decode_tps": 50.0, "tokens": 8.0, "end": 1.0} for v in range(1, 101)]
    out = summarize([{"total_tps": 80.0, "streams": streams}])
    assert out["ttft_ms_p50"] == 50.5 and out["ttft_ms_p99"] > 99.0 and out["errors"] == 0


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    import subprocess
    import time

    from bench.local_run import stop_servers

    proc = subprocess.Popen(["bash", "-c", 'trap "" TERM; echo up; sleep 30'], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"  # the trap is set
    started = time.monotonic()
    stop_servers([proc], grace_s=0.5)
    assert proc.returncode == -9 and time.monotonic() - started < 10
