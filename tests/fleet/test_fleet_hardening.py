"""The update path against a hostile mirror and a planted module (SECURITY.md, "Hardening").

- a mirror that drips one byte at a time, each in time for the read timeout, must not hold the update
  lock: the real agent gives up at the minimum rate (artifacts and metadata alike) and is free again;
- a response with a ``Content-Encoding`` is refused, never decompressed (no bomb can expand);
- the smoke test's child runs isolated (``python -I``): a ``models/__init__.py`` planted in the
  working directory never runs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from models.fleet.smoke import run_smoke_test
from models.fleet.transport import DownloadLimits

from .conftest import Operator, make_agent, run_cycle
from .rangeserver import RangeServer

# A stall is noticed within one rate window plus one read timeout: about 2 s here.
FAST_LIMITS = DownloadLimits(read_timeout_s=1.0, deadline_s=20.0, metadata_deadline_s=20.0,
                             min_rate_bps=1024.0, rate_window_s=1.0)


def test_dripping_artifact_mirror_is_cut_at_the_minimum_rate(
    operator: Operator, server: RangeServer, tmp_path: Path
) -> None:
    operator.release(1, config_padding=64 * 1024)
    server.faults.drip[".config.json"] = 0.05  # 20 bytes/s, never a read timeout
    agent = make_agent(operator, server, tmp_path / "device", download_limits=FAST_LIMITS)
    started = time.monotonic()
    result = run_cycle(agent)
    took = time.monotonic() - started
    assert result.status == "failed", result
    assert "minimum" in result.reason and "stalls" in result.reason, result.reason
    assert took < 15, took  # not the ~55 minutes the drip would take
    assert not agent.busy  # the update lock is free again
    assert agent.store.current() is None
    # The next cycle, against a healthy mirror, installs.
    server.faults.drip.clear()
    assert run_cycle(agent).status == "updated"


def test_dripping_metadata_mirror_is_cut_too(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    operator.release(1)
    server.faults.drip["timestamp.json"] = 0.05
    agent = make_agent(operator, server, tmp_path / "device", download_limits=FAST_LIMITS)
    started = time.monotonic()
    result = run_cycle(agent)
    assert result.status == "failed" and time.monotonic() - started < 15, result
    assert not agent.busy


def test_encoded_responses_are_refused_not_decompressed(
    operator: Operator, server: RangeServer, tmp_path: Path
) -> None:
    operator.release(1, config_padding=256 * 1024)  # padding compresses ~1000:1, like a bomb's start
    server.faults.gzip.add(".config.json")
    agent = make_agent(operator, server, tmp_path / "device", download_limits=FAST_LIMITS)
    result = run_cycle(agent)
    assert result.status == "failed" and "Content-Encoding 'gzip'" in result.reason, result
    server.faults.gzip = {"timestamp.json"}
    result = run_cycle(make_agent(operator, server, tmp_path / "device2", download_limits=FAST_LIMITS))
    assert result.status == "failed" and "gzip" in result.reason, result


def test_smoke_child_ignores_a_module_planted_in_the_working_directory(
    tmp_path: Path, monkeypatch
) -> None:
    planted = tmp_path / "service-cwd"
    (planted / "models").mkdir(parents=True)
    marker = tmp_path / "planted-code-ran"
    (planted / "models" / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').write('owned')\n", encoding="utf-8")
    monkeypatch.chdir(planted)
    monkeypatch.setenv("PYTHONPATH", str(planted))  # -I ignores this route in as well
    result = run_smoke_test(tmp_path / "no-such-version", timeout_s=60)
    assert not marker.exists(), "the planted models/__init__.py ran in the smoke test's child"
    assert not result.ok  # (the version dir does not exist: the real smoke code ran and said so)
    assert "planted" not in result.reason
    assert os.getcwd() == str(planted)
