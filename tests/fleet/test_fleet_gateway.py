"""End to end through the real gateway: kiosks keep streaming from the official ``openai`` client while
the operator's signed bundle is downloaded, smoke-tested and hot-swapped in by the gateway's own agent.
Every request must succeed; afterwards the gateway serves the bundle's model."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from harness import make_settings, run_gateway
from models.store import ModelStore

from .conftest import Operator
from .rangeserver import RangeServer

TOKEN = "fleet-admin-token"


@pytest.mark.slow
def test_update_while_kiosks_stream(
    operator: Operator, server: RangeServer, tmp_path: Path, embedded_model: Path
) -> None:
    operator.release(1, gguf=embedded_model)
    settings = make_settings(
        tmp_path / "gateway",
        server={"admin_token": TOKEN},
        cache={"enabled": False},
        fleet={"enabled": True, "repository_url": server.url, "trusted_root": str(operator.root),
               "check_interval_s": 3600, "check_jitter_s": 3600},
    )
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with run_gateway(settings) as gw:
        before = httpx.get(gw.base_url + "/readyz", timeout=10).json()
        outcomes: list[str] = []
        stop = threading.Event()

        def kiosk() -> None:
            client = gw.openai()
            while not stop.is_set():
                try:
                    stream = client.chat.completions.create(
                        model="edgecloud-edge", stream=True, max_tokens=12,
                        messages=[{"role": "user", "content": "Say hello to a shopper."}],
                    )
                    finish = None
                    for chunk in stream:
                        if chunk.choices and chunk.choices[0].finish_reason:
                            finish = chunk.choices[0].finish_reason
                    outcomes.append(f"ok:{finish}" if finish else "no-finish")
                except Exception as exc:  # any failure during the swap is what this test is about
                    outcomes.append(f"error:{type(exc).__name__}:{exc}")

        threads = [threading.Thread(target=kiosk, daemon=True) for _ in range(2)]
        for t in threads:
            t.start()
        while len(outcomes) < 2:
            time.sleep(0.05)
        started = httpx.post(gw.base_url + "/admin/update", headers=auth, timeout=10)
        assert started.status_code in (202, 409)  # 409: the scheduled check got there first
        during = len(outcomes)
        deadline = time.monotonic() + 240
        status: dict = {}
        while time.monotonic() < deadline:
            status = httpx.get(gw.base_url + "/admin/status", headers=auth, timeout=10).json()
            if status.get("last_result") and status["state"] == "idle":
                break
            time.sleep(0.2)
        swapped_at = len(outcomes)
        while len(outcomes) < swapped_at + 2:
            time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join(60)
        after = httpx.get(gw.base_url + "/readyz", timeout=10).json()

    # the admin call and the scheduled check may both run: one installs, the other finds it up to date
    assert status["last_result"]["status"] in ("updated", "up_to_date"), status
    assert status["installed"]["version"] == 1 and status["last_error"] is None
    journal = ModelStore(tmp_path / "gateway").journal()
    assert [e["version"] for e in journal if e["event"] == "active"] == [1]
    assert swapped_at > during  # kiosks were being served while the update ran
    assert [o for o in outcomes if not o.startswith("ok:")] == []
    assert after["version"] == "bundle-1" and after["version"] != before["version"]
