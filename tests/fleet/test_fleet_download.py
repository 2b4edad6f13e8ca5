"""Downloads: resume after a cut connection (HTTP Range), disk-space check, local-directory repository."""

from __future__ import annotations

import shutil
from pathlib import Path

from .conftest import Operator, make_agent, run_cycle
from .rangeserver import RangeServer

PADDING = 3 * 1024 * 1024


def test_cut_download_resumes_with_range(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    operator.release(1, config_padding=PADDING)
    server.faults.cut_once[".config.json"] = 1_000_000  # the link drops after ~1 MB
    progress: list[dict] = []
    agent = make_agent(operator, server, tmp_path / "device", progress_callback=progress.append)
    result = run_cycle(agent)
    assert result.status == "updated", result
    config_requests = [r for r in server.faults.requests if r[0].endswith(".config.json")]
    assert len(config_requests) == 2
    assert config_requests[0][1] is None
    assert config_requests[1][1] is not None and config_requests[1][1].startswith("bytes=")
    resumed_from = int(config_requests[1][1].removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_from <= 1_000_000  # continued, not restarted
    current = agent.store.current()
    assert current is not None and current.artifacts["config"].stat().st_size > PADDING
    assert progress and progress[-1]["bytes_done"] == progress[-1]["bytes_total"]
    assert agent.status()["progress"]["bytes_done"] == agent.status()["progress"]["bytes_total"]


def test_not_enough_disk_space_refuses_before_download(
    operator: Operator, server: RangeServer, tmp_path: Path
) -> None:
    operator.release(1, config_padding=PADDING)
    free = shutil.disk_usage(tmp_path).free
    agent = make_agent(operator, server, tmp_path / "device", reserve_bytes=free)  # "full" disk
    result = run_cycle(agent)
    assert result.status == "failed" and "not enough disk space" in result.reason
    assert not [r for r in server.faults.requests if "/targets/bundles/" in r[0]]
    assert agent.store.current_version() is None
    assert agent.status()["last_error"] == result.reason


def test_unknown_channel_is_an_error(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    operator.release(1)
    agent = make_agent(operator, server, tmp_path / "device", channel="stabel")
    result = run_cycle(agent)
    assert result.status == "failed" and "no channel 'stabel'" in result.reason
    empty = make_agent(operator, server, tmp_path / "canary", channel="canary")
    assert run_cycle(empty).status == "up_to_date"


def test_install_from_local_directory(operator: Operator, tmp_path: Path) -> None:
    """First install from set-up media (no HTTP), as the Jetson script can do."""
    operator.release(1)
    from models.fleet.agent import UpdateAgent

    agent = UpdateAgent(data_dir=tmp_path / "device", repository_url=str(operator.public),
                        trusted_root=operator.root, reserve_bytes=0)
    assert run_cycle(agent).status == "updated"
    assert agent.store.current_version() == 1


def test_disk_full_mid_download_discards_staging(operator: Operator, server: RangeServer, tmp_path: Path) -> None:
    """A real write failure half-way (RLIMIT_FSIZE makes the kernel refuse writes past 1 MB, the way a
    full disk refuses them): the update fails cleanly, staging is freed, the device keeps version 1."""
    import json
    import subprocess
    import sys

    data_dir = tmp_path / "device"
    operator.release(1)
    agent = make_agent(operator, server, data_dir)
    assert run_cycle(agent).status == "updated"
    operator.release(2, config_padding=PADDING)
    launcher = (
        "import resource, runpy, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000)); "
        "sys.argv = ['device_cli'] + sys.argv[1:]; runpy.run_module('models.fleet.device_cli', run_name='__main__')"
    )
    cmd = [sys.executable, "-c", launcher, "update", "--repository", server.url, "--trusted-root",
           str(operator.root), "--data-dir", str(data_dir), "--once", "--reserve-mb", "0", "--json"]
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
                          timeout=120, check=False)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 1 and result["status"] == "failed", proc.stderr
    assert "disk full" in result["reason"]
    assert result["installed"] == 1
    assert not (agent.store.staging_dir / "2").exists()
