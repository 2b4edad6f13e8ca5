"""One known batch of traffic whose every figure the tests can compute by hand.

Prices (acme): $2 per million input tokens, $8 per million output tokens.
"""

from __future__ import annotations

from edge.observability import Observability

from .helpers import T0, call, record

EDGE_N, CACHE_N, CLOUD_OK_N = 4, 2, 3
SAVED_EDGE = EDGE_N * (100 * 2 + 50 * 8) / 1e6      # 0.0024
SAVED_CACHE = CACHE_N * (80 * 2 + 40 * 8) / 1e6     # 0.00096
CLOUD_COST = CLOUD_OK_N * (1000 * 2 + 200 * 8) / 1e6  # 0.0108
PROMPT = "my card number is 4111 and my name is Alice"


def feed(obs: Observability, t0: float = T0) -> None:
    for i in range(EDGE_N):
        obs.observe_request(record(
            f"edge-{i}", t0 + i, "edge", reason="classifier:simple:0.93", cache="miss", ttft_ms=200.0,
            total_ms=1000.0, queue_ms=50.0, prompt_tokens=100, completion_tokens=50, tokens_per_s=25.0,
            prompt=PROMPT,
        ))
    for i in range(CACHE_N):
        obs.observe_request(record(
            f"cache-{i}", t0 + 10 + i, "cache", reason="cache:hit", cache="hit", ttft_ms=5.0, total_ms=8.0,
            prompt_tokens=80, completion_tokens=40, prompt=PROMPT,
        ))
    for i in range(CLOUD_OK_N):
        obs.observe_cloud_call(
            call(dns=2.0, connect=20.0, tls=40.0, first_byte=1400.0, total=3900.0, rid=f"cloud-{i}"),
            at=t0 + 20 + i,
        )
        obs.observe_request(record(
            f"cloud-{i}", t0 + 16 + i, "cloud", reason="classifier:complex:0.97", cache="store", provider="acme",
            ttft_ms=1500.0, total_ms=4000.0, prompt_tokens=1000, completion_tokens=200, prompt=PROMPT,
        ))
    # One kiosk request: a 429, then a retry that got a 502 and opened the breaker, then gave up.
    obs.observe_cloud_call(call(ok=False, status=429, kind="rate_limited", first_byte=80.0, total=80.0,
                                rid="cloud-err"), at=t0 + 30)
    obs.observe_cloud_call(call(ok=False, status=502, kind="server_error", first_byte=90.0, total=95.0,
                                attempt_start=300.0, retried=True, breaker="open", rid="cloud-err"), at=t0 + 31)
    obs.observe_cloud_call(call(ok=False, status=502, kind="server_error", first_byte=90.0, total=395.0,
                                attempt_start=300.0, retried=True, breaker="open", rid="cloud-err", logical=True),
                           at=t0 + 31)
    obs.observe_request(record(
        "cloud-err", t0 + 29, "cloud", reason="classifier:complex:0.99", provider="acme", outcome="error",
        status=502, error_code="upstream_error", total_ms=2000.0, prompt=PROMPT,
    ))
    obs.observe_request(record(
        "bad-1", t0 + 40, "", outcome="rejected", status=400, error_code="invalid_value", total_ms=1.0,
        prompt=PROMPT,
    ))
