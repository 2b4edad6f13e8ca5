"""A signed bundle carrying a venue knowledge pack: the gateway's own update agent downloads it,
smoke-tests the pack, activates it (the answer cache moves to its knowledge version), and a
restarted gateway loads the installed bundle's pack again."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from harness import make_settings, run_gateway

from .conftest import Operator, config_file
from .rangeserver import RangeServer

TOKEN = "fleet-knowledge-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PACK = """---
name: terminal-2
version: 2026.12.{n}
refusal.en: Please ask at the Terminal 2 information counter.
---
## gate-b (en)
Gates B1 to B20 are on the upper level, past security zone {n}.
"""


def _wait_for_update(gw) -> dict:
    started = httpx.post(gw.base_url + "/admin/update", headers=AUTH, timeout=10)
    assert started.status_code in (202, 409)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        status = httpx.get(gw.base_url + "/admin/status", headers=AUTH, timeout=10).json()
        if status.get("last_result") and status["state"] == "idle":
            return status
        time.sleep(0.2)
    raise AssertionError("the update did not finish")


@pytest.mark.slow
def test_a_bundle_with_a_knowledge_pack_activates_it(
    operator: Operator, server: RangeServer, tmp_path: Path, embedded_model: Path
) -> None:
    pack = tmp_path / "terminal-2.md"
    pack.write_text(PACK.format(n=1), encoding="utf-8")
    operator.repo.build(version=1, artifacts={"knowledge": [pack], "config": [config_file(tmp_path / "c.json")]},
                        label="v1")
    operator.repo.promote("stable", 1)
    operator.repo.publish(operator.public)
    settings = make_settings(
        tmp_path / "gateway", server={"admin_token": TOKEN},
        fleet={"enabled": True, "repository_url": server.url, "trusted_root": str(operator.root),
               "check_interval_s": 3600, "check_jitter_s": 3600},
    )
    with run_gateway(settings) as gw:
        assert httpx.get(gw.base_url + "/admin/knowledge", headers=AUTH, timeout=10).json()["loaded"] is False
        status = _wait_for_update(gw)
        assert status["last_result"]["status"] in ("updated", "up_to_date"), status
        knowledge = httpx.get(gw.base_url + "/admin/knowledge", headers=AUTH, timeout=10).json()
        assert knowledge["name"] == "terminal-2" and knowledge["version"] == "2026.12.1"
        assert gw.services.cache.knowledge_version == knowledge["knowledge_version"]
        route = httpx.post(gw.base_url + "/v1/route", timeout=10,
                           json={"messages": [{"role": "user", "content": "Where are the B gates?"}]}).json()
        assert route["knowledge"]["passages"][0]["id"] == "gate-b"

    with run_gateway(settings) as gw:  # a restart loads the installed bundle's pack
        knowledge = httpx.get(gw.base_url + "/admin/knowledge", headers=AUTH, timeout=10).json()
        assert knowledge["name"] == "terminal-2" and knowledge["version"] == "2026.12.1"
