"""Power cut at every step: SIGKILL the device CLI mid-update, then check the store and the next run.

The agent runs as ``python -m models.fleet.device_cli update --once`` in a child process with
``EDGECLOUD_FAULT_KILL_AT=<step>``; SIGKILL skips every ``finally`` and buffer flush, like a power cut.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from models.fleet.faults import ENV, STEPS
from models.store import ModelStore

from .conftest import Operator
from .rangeserver import RangeServer

ROOT = Path(__file__).resolve().parents[2]


def _update(operator: Operator, server: RangeServer, data_dir: Path, kill_at: str | None = None):
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if kill_at:
        env[ENV] = kill_at
    cmd = [sys.executable, "-m", "models.fleet.device_cli", "update", "--repository", server.url,
           "--trusted-root", str(operator.root), "--data-dir", str(data_dir), "--once", "--reserve-mb", "0",
           "--json"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS)
def test_sigkill_at_each_step_then_next_run_finishes(
    step: str, operator: Operator, server: RangeServer, tmp_path: Path
) -> None:
    data_dir = tmp_path / "device"
    operator.release(1)
    first = _update(operator, server, data_dir)
    assert first.returncode == 0, first.stderr
    operator.release(2, config_padding=3 * 1024 * 1024)
    server.faults.requests.clear()

    killed = _update(operator, server, data_dir, kill_at=step)
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stdout, killed.stderr)

    # Right after the cut, the pointer names a complete version (what a restarting gateway would load).
    store = ModelStore(data_dir)
    after_cut = store.current()
    assert after_cut is not None and after_cut.version in (1, 2)
    assert after_cut.artifacts["faq"].is_file()
    # Start-up recovery: back to the last version that passed its health check.
    store.recover()
    assert store.current_version() == 1
    assert store.installed_versions() == [1]
    if step in ("before_switch", "after_switch"):
        assert store.journal()[-1]["event"] == "recovered"

    server.faults.requests.clear()
    second = _update(operator, server, data_dir)
    assert second.returncode == 0, second.stderr
    result = json.loads(second.stdout.strip().splitlines()[-1])
    assert result["status"] == "updated" and result["installed"] == 2
    store = ModelStore(data_dir)
    assert store.current_version() == 2 and store.previous_version() == 1
    assert list(store.staging_dir.iterdir()) == []
    artifact_requests = [r for r in server.faults.requests if "/targets/bundles/" in r[0]]
    if step == "download_part":
        ranged = [r for r in artifact_requests if r[0].endswith(".config.json")]
        assert ranged and ranged[0][1] is not None  # resumed with Range, not from zero
    else:
        assert artifact_requests == []  # staged files were kept and re-verified, not downloaded again
