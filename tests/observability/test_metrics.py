"""/metrics after known traffic, parsed back with prometheus_client's own parser."""

from __future__ import annotations

import pytest

from edge.observability import Observability
from edge.observability.metrics import reason_label
from edge.observability.web import dashboard_data

from .helpers import API_KEY, make_settings, metric_values, value
from .traffic import CACHE_N, CLOUD_COST, CLOUD_OK_N, EDGE_N, SAVED_CACHE, SAVED_EDGE, feed

# The shape of models.fleet.agent.UpdateAgent.status().
AGENT_STATUS = {
    "state": "idle",
    "installed": {"version": 7, "label": "smollm2", "bundle": "b", "hardware": "orin-nx", "path": "/x",
                  "artifacts": {}},
    "previous": None,
    "channel": "stable",
    "hardware": "orin-nx",
    "agent_version": "1",
    "repository": "https://updates.example.invalid/fleet",
    "last_check": 1767225600.0,
    "last_error": None,
    "last_result": {"status": "updated", "version": 7, "installed": 7, "reason": "", "error_type": "",
                    "smoke": {}, "finished_at": 1767225600.0},
    "progress": {"bytes_done": 10},
}


@pytest.fixture
def obs(tmp_path):
    o = Observability(make_settings(tmp_path))
    o.bind_state(
        queue_depth=lambda: 3,
        model_loaded=lambda: True,
        breaker_states=lambda: {"acme": "half_open", "backup": "closed"},
        update_status=lambda: AGENT_STATUS,
        installed_version=lambda: "smollm2-135m-q4@2026.01.1",
    )
    feed(o)
    return o


def test_request_counters_and_histograms(obs: Observability) -> None:
    v = metric_values(obs.render_metrics()[0].decode())
    assert value(v, "edgecloud_requests_total", route="edge", reason="classifier:simple", outcome="ok") == EDGE_N
    assert value(v, "edgecloud_requests_total", route="cache", reason="cache:hit", outcome="ok") == CACHE_N
    assert value(v, "edgecloud_requests_total", route="cloud", reason="classifier:complex", outcome="ok") \
        == CLOUD_OK_N
    assert value(v, "edgecloud_requests_total", route="cloud", reason="classifier:complex", outcome="error") == 1
    assert value(v, "edgecloud_requests_total", route="none", reason="none", outcome="rejected") == 1
    # TTFT: edge at 200 ms -> in the 0.25 s bucket, not the 0.15 s one; cloud at 1.5 s.
    assert value(v, "edgecloud_time_to_first_token_seconds_bucket", route="edge", le="0.15") == 0
    assert value(v, "edgecloud_time_to_first_token_seconds_bucket", route="edge", le="0.25") == EDGE_N
    assert value(v, "edgecloud_time_to_first_token_seconds_count", route="edge") == EDGE_N
    assert value(v, "edgecloud_time_to_first_token_seconds_sum", route="edge") == pytest.approx(0.8)
    assert value(v, "edgecloud_time_to_first_token_seconds_bucket", route="cache", le="0.01") == CACHE_N
    assert value(v, "edgecloud_time_to_first_token_seconds_bucket", route="cloud", le="1.0") == 0
    assert value(v, "edgecloud_time_to_first_token_seconds_bucket", route="cloud", le="1.5") == CLOUD_OK_N
    assert value(v, "edgecloud_time_to_first_token_seconds_bucket", route="cloud", le="30.0") == CLOUD_OK_N
    assert value(v, "edgecloud_request_duration_seconds_count", route="cloud") == CLOUD_OK_N + 1
    assert value(v, "edgecloud_request_duration_seconds_sum", route="cloud") == pytest.approx(14.0)
    assert value(v, "edgecloud_queue_wait_seconds_sum", route="edge") == pytest.approx(0.2)
    assert value(v, "edgecloud_tokens_per_second_bucket", route="edge", le="30.0") == EDGE_N
    assert value(v, "edgecloud_tokens_total", route="cloud", kind="prompt") == 3000
    assert value(v, "edgecloud_tokens_total", route="edge", kind="completion") == 200
    assert value(v, "edgecloud_cache_lookups_total", result="hit") == CACHE_N
    assert value(v, "edgecloud_cache_lookups_total", result="miss") == EDGE_N + CLOUD_OK_N
    assert value(v, "edgecloud_money_saved_usd_total", route="edge") == pytest.approx(SAVED_EDGE)
    assert value(v, "edgecloud_money_saved_usd_total", route="cache") == pytest.approx(SAVED_CACHE)
    assert value(v, "edgecloud_cloud_cost_usd_total", provider="acme") == pytest.approx(CLOUD_COST)
    # Buckets cover 10 ms .. 30 s.
    les = {float(labels[0][1]) for (name, labels) in v if name == "edgecloud_request_duration_seconds_bucket"
           and labels[0][0] == "le" and labels[0][1] != "+Inf"}
    assert min(les) == 0.01 and max(les) == 30.0


def test_cloud_phases_retries_429_and_breakers(obs: Observability) -> None:
    v = metric_values(obs.render_metrics()[0].decode())
    assert value(v, "edgecloud_cloud_calls_total", provider="acme", outcome="ok") == CLOUD_OK_N
    assert value(v, "edgecloud_cloud_calls_total", provider="acme", outcome="error") == 2
    assert value(v, "edgecloud_cloud_errors_total", provider="acme", kind="server_error") == 1
    assert value(v, "edgecloud_cloud_errors_total", provider="acme", kind="rate_limited") == 1
    assert value(v, "edgecloud_cloud_requests_total", provider="acme", outcome="error") == 1  # the logical call
    assert value(v, "edgecloud_cloud_rate_limited_total", provider="acme") == 1
    assert value(v, "edgecloud_cloud_retries_total", provider="acme") == 1
    for phase, total in (("dns", 0.006), ("connect", 0.06), ("tls", 0.12)):
        assert value(v, "edgecloud_cloud_phase_seconds_count", provider="acme", phase=phase) == CLOUD_OK_N
        assert value(v, "edgecloud_cloud_phase_seconds_sum", provider="acme", phase=phase) == pytest.approx(total)
    assert value(v, "edgecloud_cloud_phase_seconds_count", provider="acme", phase="first_byte") == 5
    assert value(v, "edgecloud_cloud_phase_seconds_sum", provider="acme", phase="first_byte") \
        == pytest.approx(3 * 1.4 + 0.08 + 0.09)
    # Durations, not offsets: the retry started 300 ms into the call and lasted 95 ms.
    assert value(v, "edgecloud_cloud_phase_seconds_sum", provider="acme", phase="total") \
        == pytest.approx(3 * 3.9 + 0.08 + 0.095)
    # The bound breaker states win over the last state seen on a call ("open").
    assert value(v, "edgecloud_cloud_breaker_state", provider="acme", state="half_open") == 1
    assert value(v, "edgecloud_cloud_breaker_state", provider="acme", state="open") == 0
    assert value(v, "edgecloud_cloud_breaker_state", provider="backup", state="closed") == 1


def test_cancelled_attempts_say_nothing_about_the_provider(tmp_path) -> None:
    import asyncio

    from .helpers import T0, call

    o = Observability(make_settings(tmp_path))
    o.observe_cloud_call(call(ok=False, status=None, cancelled=True, rid="gone"), at=T0)
    o.observe_cloud_call(call(first_byte=250.0, total=900.0, attempt_start=0.0, rid="fine"), at=T0 + 1)
    v = metric_values(o.render_metrics()[0].decode())
    assert value(v, "edgecloud_cloud_calls_total", provider="acme", outcome="cancelled") == 1
    assert value(v, "edgecloud_cloud_calls_total", provider="acme", outcome="error") == 0
    (row,) = asyncio.run(o.flush(now=T0 + 3600))
    assert (row.scope, row.requests, row.errors, row.ttft_p99_ms, row.total_p99_ms) == ("provider", 1, 0, 250.0, 900.0)


def test_state_gauges_updates_and_model(obs: Observability) -> None:
    v = metric_values(obs.render_metrics()[0].decode())
    assert value(v, "edgecloud_edge_queue_depth") == 3
    assert value(v, "edgecloud_edge_model_loaded") == 1
    assert value(v, "edgecloud_model_info", version="smollm2-135m-q4@2026.01.1") == 1
    assert value(v, "edgecloud_update_info", state="idle", last_result="updated", installed_version="7",
                 channel="stable", hardware="orin-nx", agent_version="1") == 1
    assert value(v, "edgecloud_update_status_value", field="last_check") == 1767225600.0
    assert value(v, "edgecloud_update_status_value", field="installed_version") == 7
    assert value(v, "edgecloud_update_status_value", field="last_result_at") == 1767225600.0
    assert "updates.example.invalid" not in str(v)  # the repository URL is not a label
    d = dashboard_data(obs)["update"]
    assert (d["state"], d["last_result"], d["installed_version"]) == ("idle", "updated", 7)


def test_fleet_update_metrics_share_the_registry(obs: Observability) -> None:
    """edge/assembly.py passes ``obs.registry`` to the UpdateAgent: its series then appear on /metrics too."""
    from models.fleet.agent import UpdateMetrics

    fleet = UpdateMetrics(obs.registry)
    fleet.bundle_version.set(7)
    fleet.updates.labels(result="updated").inc()
    v = metric_values(obs.render_metrics()[0].decode())
    assert value(v, "edgecloud_model_bundle_version") == 7
    assert value(v, "edgecloud_model_updates_total", result="updated") == 1
    assert value(v, "edgecloud_model_info", version="smollm2-135m-q4@2026.01.1") == 1


def test_broken_state_sources_do_not_break_a_scrape(tmp_path) -> None:
    o = Observability(make_settings(tmp_path))

    def boom() -> int:
        raise RuntimeError("model crashed")

    o.bind_state(queue_depth=boom, model_loaded=boom, breaker_states=boom, update_status=None,
                 installed_version=boom)
    v = metric_values(o.render_metrics()[0].decode())
    assert value(v, "edgecloud_edge_queue_depth") == 0
    assert value(v, "edgecloud_model_info", version="none") == 1


def test_no_key_in_metrics_or_dashboard(obs: Observability) -> None:
    assert API_KEY not in obs.render_metrics()[0].decode()
    assert API_KEY not in str(dashboard_data(obs))


def test_reason_labels_are_bounded() -> None:
    assert reason_label("classifier:complex:0.97") == "classifier:complex"
    assert reason_label("") == "none"
    assert reason_label("override") == "override"
    assert reason_label("a:b:c:d") == "a:b"
    assert len(reason_label("x" * 500)) == 40


def test_observe_request_is_cheap(obs: Observability) -> None:
    """Cost relative to one json.dumps of the record, measured in the same run (no absolute timings)."""
    import json
    import time

    from .helpers import record

    recs = [record(f"p{i}", 1767225600.0 + i, "edge", reason="classifier:simple:0.9", ttft_ms=100.0,
                   total_ms=300.0, prompt_tokens=10, completion_tokens=20) for i in range(2000)]
    obs.request_log.disabled = True
    try:
        start = time.perf_counter()
        for r in recs:
            obs.observe_request(r)
        observe = time.perf_counter() - start
    finally:
        obs.request_log.disabled = False
    start = time.perf_counter()
    for r in recs:
        json.dumps(r.as_dict())
    dumps = time.perf_counter() - start
    assert observe < 40 * dumps


def test_early_starts_are_counted_by_backend_and_use(tmp_path) -> None:
    from edge.records import RequestRecord

    o = Observability(make_settings(tmp_path))
    for route, early, dropped in (("edge", "kept", "cloud"), ("cloud", "kept", "edge"), ("edge", "kept", "cloud"),
                                  ("cloud", "switched", "edge"), ("", None, "edge,cloud")):
        o.observe_request(RequestRecord(request_id="r", started_at=0.0, route=route, early_start=early,
                                        early_dropped=dropped, outcome="ok" if route else "rejected"))
    v = metric_values(o.render_metrics()[0].decode())
    assert value(v, "edgecloud_early_starts_total", backend="edge", outcome="used") == 2
    assert value(v, "edgecloud_early_starts_total", backend="cloud", outcome="used") == 1
    assert value(v, "edgecloud_early_starts_total", backend="cloud", outcome="dropped") == 3
    assert value(v, "edgecloud_early_starts_total", backend="edge", outcome="dropped") == 3
