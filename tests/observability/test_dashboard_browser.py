"""Headless Chromium opens the dashboard after traffic: the charts show what /metrics shows.

Debian's ``chromium`` is installed by ``make test``'s set-up when missing (root and apt needed);
without it the test is skipped with the reason. A screenshot is saved under bench/results/.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest

from .app import build_app
from .browser import Elements, browser, chromium
from .helpers import make_settings, metric_values, serve, value

pytestmark = pytest.mark.slow
RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def test_dashboard_shows_what_metrics_show(tmp_path: Path) -> None:
    exe = chromium()
    with serve(build_app(make_settings(tmp_path / "data"))) as url:
        now = time.time()
        traffic = [
            {"request_id": f"edge-{i}", "started_at": now - 2, "route": "edge", "reason": "classifier:simple:0.9",
             "cache": "miss", "ttft_ms": 120.0 + 40 * i, "total_ms": 1500.0, "prompt_tokens": 60,
             "completion_tokens": 30}
            for i in range(7)
        ] + [
            {"request_id": f"cache-{i}", "started_at": now - 2, "route": "cache", "reason": "cache:hit",
             "cache": "hit", "ttft_ms": 6.0, "total_ms": 7.0, "prompt_tokens": 60, "completion_tokens": 30}
            for i in range(3)
        ] + [
            {"request_id": f"cloud-{i}", "started_at": now - 2, "route": "cloud", "provider": "acme",
             "reason": "classifier:complex:0.95", "cache": "store", "ttft_ms": 900.0 + 600 * i, "total_ms": 1900.0,
             "prompt_tokens": 400, "completion_tokens": 120}
            for i in range(2)
        ]
        assert httpx.post(f"{url}/_test/requests", json=traffic).status_code == 200
        metrics = metric_values(httpx.get(f"{url}/metrics").text)
        data = httpx.get(f"{url}/dashboard/data").json()

        dom = browser(exe, tmp_path / "profile", "--dump-dom", f"{url}/dashboard")
        assert dom.returncode == 0, dom.stderr[-2000:]
        RESULTS.mkdir(parents=True, exist_ok=True)
        shot = RESULTS / "dashboard.png"
        pic = browser(exe, tmp_path / "profile2", "--window-size=1280,1800", f"--screenshot={shot}",
                       f"{url}/dashboard")
        assert pic.returncode == 0 and shot.stat().st_size > 10_000, pic.stderr[-2000:]
        shutil.copy(shot, tmp_path / "dashboard.png")

    page = Elements()
    page.feed(dom.stdout)
    assert page.by_id["status"]["_text"].startswith("updated"), "the dashboard never loaded its data"

    def counted(route: str) -> float:
        return sum(v for (name, labels), v in metrics.items()
                   if name == "edgecloud_requests_total" and dict(labels)["route"] == route)

    # Route mix: the bars' numbers are the request counters.
    for route, expected in (("edge", 7), ("cache", 3), ("cloud", 2)):
        mix = page.by_id[f"mix-{route}"]
        assert float(mix["data-value"]) == counted(route) == expected
        assert mix["_text"].startswith(f"{expected} (")
    # Money saved, and the hit ratio from the cache counters.
    saved = sum(v for (name, _), v in metrics.items() if name == "edgecloud_money_saved_usd_total")
    assert float(page.by_id["money-saved"]["data-value"]) == pytest.approx(saved)
    assert page.by_id["money-saved"]["_text"] == f"${saved:.4f}"
    hits = value(metrics, "edgecloud_cache_lookups_total", result="hit")
    misses = value(metrics, "edgecloud_cache_lookups_total", result="miss")
    assert float(page.by_id["hit-ratio"]["data-value"]) == pytest.approx(hits / (hits + misses))
    assert page.by_id["hit-ratio"]["_text"] == f"{100 * hits / (hits + misses):.1f}%"
    assert page.by_id["model-version"]["_text"] == "smollm2-135m@2026.01.1"
    # TTFT charts: one P50 and one P99 point per route and minute, the numbers of /dashboard/data,
    # covering as many requests as the TTFT histogram counted, with P99 inside the histogram's range.
    for route in ("edge", "cache", "cloud"):
        pts = [p for p in page.points if p["data-route"] == route]
        p99 = {p["data-minute"]: float(p["data-value"]) for p in pts if p["data-quantile"] == "p99"}
        p50 = {p["data-minute"]: float(p["data-value"]) for p in pts if p["data-quantile"] == "p50"}
        expected = {str(pt["minute"]): pt for pt in data["ttft"][route]}
        assert set(p99) == set(p50) == set(expected)
        for minute, pt in expected.items():
            assert p99[minute] == pt["p99"] and p50[minute] == pt["p50"]
        shown = sum(int(p["data-requests"]) for p in pts if p["data-quantile"] == "p99")
        assert shown == value(metrics, "edgecloud_time_to_first_token_seconds_count", route=route)
        top = max(p99.values())
        full = min(float(dict(labels)["le"]) for (name, labels), v in metrics.items()
                   if name == "edgecloud_time_to_first_token_seconds_bucket" and dict(labels)["route"] == route
                   and v == shown)
        assert top / 1000.0 <= full
    assert max(float(p["data-value"]) for p in page.points
               if p["data-route"] == "edge" and p["data-quantile"] == "p99") == 360.0
