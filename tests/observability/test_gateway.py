"""Against the real gateway (``edge.app.create_app`` on uvicorn, the embedded llama.cpp model, the
official ``openai`` client as the kiosk): what it answered is what /metrics, the dashboard data,
the SLA store and the headless browser show.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from .browser import INSTALL_HINT, Elements, browser, find_chromium
from .helpers import metric_values, value

pytestmark = pytest.mark.slow

harness = pytest.importorskip("harness")  # tests/harness.py, on sys.path through tests/conftest.py


def test_real_gateway_traffic_shows_up_everywhere(tmp_path: Path, embedded_model: Path) -> None:
    settings = harness.make_settings(tmp_path, edge={"max_queue": 4}, cache={"enabled": False})
    with harness.run_gateway(settings) as gw:
        kiosk = gw.openai()
        usage = []
        for i in range(3):
            r = kiosk.chat.completions.create(
                model="edgecloud-edge", messages=[{"role": "user", "content": f"Say hello {i}"}], max_tokens=6,
            )
            usage.append(r.usage)
        stream = kiosk.chat.completions.create(
            model="edgecloud-edge", messages=[{"role": "user", "content": "Count to three"}], max_tokens=6,
            stream=True,
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

        metrics = metric_values(httpx.get(f"{gw.base_url}/metrics").text)
        edge_requests = sum(v for (name, labels), v in metrics.items()
                            if name == "edgecloud_requests_total" and dict(labels).get("route") == "edge")
        assert edge_requests == 4
        assert value(metrics, "edgecloud_time_to_first_token_seconds_count", route="edge") == 4
        assert value(metrics, "edgecloud_tokens_total", route="edge", kind="prompt") \
            >= sum(u.prompt_tokens for u in usage)
        assert value(metrics, "edgecloud_edge_model_loaded") == 1
        saved = value(metrics, "edgecloud_money_saved_usd_total", route="edge")
        assert saved > 0

        data = httpx.get(f"{gw.base_url}/dashboard/data").json()
        assert data["route_mix"]["edge"] == 4
        assert sum(p["requests"] for p in data["ttft"]["edge"]) == 4
        assert data["money"]["saved_usd"] == pytest.approx(saved)

        # The SLA minute and usage reach the store when the minute is rolled up.
        obs = gw.services.obs
        gw.call(obs.flush(final=True))
        # The four requests may straddle a minute (slow answers on a loaded machine): count every edge row.
        edge_rows = [r.data for r in obs.store.query(kinds=("route",)) if r.name == "edge"]
        assert sum(r["requests"] for r in edge_rows) == 4 and all(r["availability"] == 1.0 for r in edge_rows)
        stored = obs.store.query(kinds=("usage",))
        assert sum(r.data["requests"] for r in stored if r.name == "edge") == 4

        exe = find_chromium()
        if exe is None:  # everything above was checked; say plainly that the page was not
            pytest.skip(f"dashboard page not checked: {INSTALL_HINT}")
        dom = browser(exe, tmp_path / "profile", "--dump-dom", f"{gw.base_url}/")
        assert dom.returncode == 0, dom.stderr[-2000:]
    page = Elements()
    page.feed(dom.stdout)
    assert float(page.by_id["mix-edge"]["data-value"]) == edge_requests
    assert float(page.by_id["money-saved"]["data-value"]) == pytest.approx(saved)
    pts = [p for p in page.points if p["data-route"] == "edge" and p["data-quantile"] == "p99"]
    assert sum(int(p["data-requests"]) for p in pts) == 4
