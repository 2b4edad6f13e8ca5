"""The router on a real uvicorn server on 127.0.0.1: /metrics, /, /dashboard, its data and assets."""

from __future__ import annotations

import time

import httpx
import pytest

from .app import build_app
from .helpers import API_KEY, make_settings, metric_values, serve, value


@pytest.fixture
def base_url(tmp_path):
    with serve(build_app(make_settings(tmp_path))) as url:
        yield url


def _traffic(url: str) -> None:
    now = time.time()
    body = [
        {"request_id": f"e{i}", "started_at": now - 1, "route": "edge", "reason": "classifier:simple:0.9",
         "ttft_ms": 100.0 * (i + 1), "total_ms": 900.0, "prompt_tokens": 50, "completion_tokens": 20,
         "cache": "miss"}
        for i in range(5)
    ] + [{"request_id": "h1", "started_at": now - 1, "route": "cache", "cache": "hit", "ttft_ms": 4.0,
          "total_ms": 5.0, "prompt_tokens": 50, "completion_tokens": 20}]
    r = httpx.post(f"{url}/_test/requests", json=body)
    assert r.status_code == 200 and r.json() == {"recorded": 6}


def test_metrics_endpoint(base_url: str) -> None:
    _traffic(base_url)
    r = httpx.get(f"{base_url}/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=")
    v = metric_values(r.text)
    assert value(v, "edgecloud_requests_total", route="edge", reason="classifier:simple", outcome="ok") == 5
    assert value(v, "edgecloud_time_to_first_token_seconds_count", route="edge") == 5
    assert value(v, "edgecloud_cache_lookups_total", result="hit") == 1
    assert value(v, "edgecloud_edge_model_loaded") == 1
    assert value(v, "edgecloud_device_memory_total_bytes") > 0  # the sampler ran in the lifespan
    assert API_KEY not in r.text


def test_root_redirects_and_dashboard_is_self_contained(base_url: str) -> None:
    r = httpx.get(f"{base_url}/")
    assert r.status_code == 307 and r.headers["location"] == "/dashboard"
    page = httpx.get(f"{base_url}/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "http://" not in page.text and "https://" not in page.text  # nothing from the internet
    for name, kind in (("dashboard.js", "text/javascript"), ("dashboard.css", "text/css")):
        asset = httpx.get(f"{base_url}/dashboard/assets/{name}")
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind)
        assert "https://" not in asset.text
    missing = httpx.get(f"{base_url}/dashboard/assets/../../config.py")
    assert missing.status_code == 404
    nope = httpx.get(f"{base_url}/dashboard/assets/evil.js")
    assert nope.status_code == 404 and nope.json()["error"]["code"] == "not_found"


def test_dashboard_data(base_url: str) -> None:
    _traffic(base_url)
    d = httpx.get(f"{base_url}/dashboard/data").json()
    assert d["route_mix"] == {"edge": 5, "cloud": 0, "cache": 1}
    (point,) = d["ttft"]["edge"]  # one minute, still open, shown live
    assert point["requests"] == 5 and point["p50"] == pytest.approx(300.0, rel=0.01) and point["p99"] == 500.0
    assert d["cache"] == {"hits": 1, "misses": 5, "hit_ratio": pytest.approx(1 / 6)}
    assert d["money"]["saved_usd"] == pytest.approx(6 * (50 * 2 + 20 * 8) / 1e6)
    assert d["model"] == {"version": "smollm2-135m@2026.01.1", "loaded": True, "queue_depth": 1}
    assert d["update"] == {"state": "idle", "last_result": "installed"}
    assert d["device"]["memory_total_bytes"] > 0
    assert d["breaches"] == []


def test_without_observability_the_endpoints_answer_503(tmp_path) -> None:
    with serve(build_app(make_settings(tmp_path), with_obs=False)) as url:
        for path in ("/metrics", "/dashboard/data"):
            r = httpx.get(f"{url}{path}")
            assert r.status_code == 503
            assert r.json()["error"]["code"] == "observability_unavailable"
            assert set(r.json()["error"]) == {"message", "type", "param", "code"}
