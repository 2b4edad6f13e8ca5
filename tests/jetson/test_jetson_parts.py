"""The parts jetson/setup.sh relies on, tested for real: the GPU proof against the installed
llama-cpp-python, the health probe against a real gateway, the rendered config against the
gateway's settings loader, and the rendered unit files with `systemd-analyze verify`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import pytest

from edge.config import load_settings
from harness import free_port, make_settings, run_gateway
from tests.jetson.jetson_harness import BOARDS, REPO, FakeJetson

GPU_CHECK = REPO / "jetson" / "gpu_check.py"
HEALTH_PROBE = REPO / "jetson" / "health_probe.py"


def _load(path: Path):
    """jetson/*.py are scripts run by setup.sh, not a package: load them by path."""
    spec = importlib.util.spec_from_file_location(f"jetson_script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


gpu_check = _load(GPU_CHECK)
health_probe = _load(HEALTH_PROBE)

# A llama.cpp CUDA load log (the lines gpu_check.py reads), as printed by llama.cpp's loader.
CUDA_LOG = """\
load_tensors: layer  27 assigned to device CUDA0, is_swa = 0
load_tensors: layer  28 assigned to device CUDA0, is_swa = 0
load_tensors: offloading 28 repeating layers to GPU
load_tensors: offloading output layer to GPU
load_tensors: offloaded 29/29 layers to GPU
load_tensors:        CUDA0 model buffer size =  4168.09 MiB
"""


def keyvals(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


# --- gpu_check.py -------------------------------------------------------------------------


def test_offload_summary_line_decides() -> None:
    assert gpu_check.parse_offload(CUDA_LOG) == gpu_check.Offload(29, 29)
    assert gpu_check.parse_offload(CUDA_LOG).complete
    partial = CUDA_LOG.replace("offloaded 29/29", "offloaded 20/29")
    assert not gpu_check.parse_offload(partial).complete


def test_per_layer_devices_count_when_there_is_no_summary() -> None:
    mixed = "".join(f"load_tensors: layer {i:3d} assigned to device {'CUDA0' if i < 10 else 'CPU'}, is_swa = 0\n"
                    for i in range(30))
    assert gpu_check.parse_offload(mixed) == gpu_check.Offload(10, 30)
    assert gpu_check.parse_offload("nothing about layers") is None


def test_build_check_tells_the_truth_about_this_llama_cpp() -> None:
    proc = subprocess.run([sys.executable, str(GPU_CHECK), "--supports-only"],
                          capture_output=True, text=True, timeout=120, check=False)
    facts = keyvals(proc.stdout)
    supports = bool(llama_cpp.llama_supports_gpu_offload())
    assert facts["llama_cpp_version"] == llama_cpp.__version__
    assert facts["gpu_offload"] == str(int(supports))
    if supports:
        assert proc.returncode == gpu_check.EXIT_OK and facts["verdict"] == "gpu-build"
    else:  # the CPU-only wheel CI builds: exactly the trap the installer must catch
        assert proc.returncode == gpu_check.EXIT_CPU_ONLY and facts["verdict"] == "cpu-only-build"


def test_a_real_load_reports_where_the_layers_went(embedded_model: Path) -> None:
    offload = gpu_check.check_model(str(embedded_model), n_ctx=256, n_gpu_layers=-1)

    assert offload is not None and offload.total > 0
    if llama_cpp.llama_supports_gpu_offload():
        assert offload.complete
    else:
        assert offload.offloaded == 0 and not offload.complete


# --- health_probe.py ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, embedded_model: Path) -> Iterator:
    settings = make_settings(tmp_path_factory.mktemp("gw"), cache={"enabled": False})
    with run_gateway(settings) as gw:
        yield gw


def test_probe_times_a_real_streamed_completion(gateway) -> None:
    ready = subprocess.run([sys.executable, str(HEALTH_PROBE), "wait", "--url", gateway.base_url, "--timeout", "30"],
                           capture_output=True, text=True, timeout=60, check=False)
    probe = subprocess.run([sys.executable, str(HEALTH_PROBE), "probe", "--url", gateway.base_url,
                            "--max-tokens", "12"], capture_output=True, text=True, timeout=120, check=False)

    assert ready.returncode == 0 and keyvals(ready.stdout)["ready"] == "1"
    assert probe.returncode == 0, probe.stdout + probe.stderr
    facts = keyvals(probe.stdout)
    assert float(facts["ttft_s"]) > 0
    assert 1 <= int(facts["completion_tokens"]) <= 12
    assert float(facts["tokens_per_s"]) >= 0
    assert facts["sample"].startswith('"')


def test_probe_says_when_nothing_answers() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert health_probe.wait_ready(url, timeout_s=0.2, interval_s=0.05) is False
    proc = subprocess.run([sys.executable, str(HEALTH_PROBE), "probe", "--url", url, "--timeout", "5"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1 and "probe_error=" in proc.stdout


def test_tokens_per_s_counts_decode_only() -> None:
    result = health_probe.ProbeResult(ttft_s=0.5, completion_tokens=11, decode_s=2.0, text="x")
    assert result.tokens_per_s == 5.0
    assert health_probe.ProbeResult(0.5, 1, 0.0, "x").tokens_per_s == 0.0


# --- rendered files -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def installed_board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeJetson]:
    board = FakeJetson(tmp_path_factory.mktemp("board"), BOARDS["jp6-16gb"])
    board.install("--jetson-clocks")
    # The resume unit exists only between a --reboot and the boot after it: rendered here as setup.sh does.
    template = (REPO / "jetson/systemd/edgecloud-setup-resume.service.in").read_text()
    board.path("/etc/systemd/system/edgecloud-setup-resume.service").write_text(
        template.replace("@SETUP@", "/opt/edgecloud-src/jetson/setup.sh"))
    setup = board.path("/opt/edgecloud-src/jetson/setup.sh")
    setup.parent.mkdir(parents=True)
    setup.write_text("#!/bin/sh\n")
    setup.chmod(0o755)
    yield board
    board.close()


def test_rendered_config_loads_in_the_gateway(installed_board: FakeJetson) -> None:
    settings = load_settings(installed_board.path("/etc/edgecloud/config.toml"), environ={})

    assert settings.server.host == "127.0.0.1"
    assert settings.server.port == installed_board.port
    assert settings.server.admin_token is not None and len(settings.server.admin_token.get_secret_value()) == 48
    assert settings.edge.n_gpu_layers == -1
    assert settings.edge.n_ctx == 4096 and settings.edge.parallel == 4  # per slot, four slots
    assert str(settings.edge.model_path) == "/opt/edgecloud/models/Qwen2.5-7B-Instruct-Q4_K_M.gguf"
    assert settings.fleet.enabled is False and settings.fleet.hardware == "jetson-orin-nx-16gb"


def _system_unit_dir() -> Path | None:
    for candidate in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")):
        if (candidate / "sysinit.target").exists():
            return candidate
    return None


@pytest.fixture(scope="module")
def systemd_analyze() -> str:
    """systemd-analyze, installed from Debian's packages when missing (CI runs as root)."""
    exe = shutil.which("systemd-analyze")
    if exe is None and hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600, check=False)
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "systemd"],
                       env=env, capture_output=True, timeout=900, check=False)
        exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze is not installed and could not be installed here "
                    "(needs root and apt-get): the unit files were not verified")
    if _system_unit_dir() is None:
        pytest.skip("systemd's own units (sysinit.target) are missing: systemd-analyze verify cannot run here")
    return exe


def test_unit_files_pass_systemd_analyze_verify(installed_board: FakeJetson, systemd_analyze: str) -> None:
    root = installed_board.root
    link = root / "usr/lib/systemd/system"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(_system_unit_dir())  # systemd's targets, so After=/WantedBy= resolve

    proc = subprocess.run([systemd_analyze, "verify", f"--root={root}", "edgecloud.service",
                           "edgecloud-tune.service", "edgecloud-setup-resume.service"],
                          capture_output=True, text=True, timeout=120, check=False)

    if "Failed to" in proc.stderr and "sysinit.target" in proc.stderr:
        pytest.skip(f"systemd-analyze verify cannot run in this sandbox: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr
    # verify only warns about unknown keys; for us any warning is a defect.
    for word in ("Unknown key", "Unknown section", "not executable", "Invalid", "ignoring"):
        assert word not in proc.stderr, proc.stderr


def test_verify_catches_a_broken_unit(installed_board: FakeJetson, systemd_analyze: str, tmp_path: Path) -> None:
    """The check above is worth something: the same call rejects a unit with a missing binary."""
    broken = tmp_path / "broken.service"
    unit = installed_board.path("/etc/systemd/system/edgecloud.service").read_text()
    broken.write_text(unit.replace("/opt/edgecloud/venv/bin/edgecloud", "/nonexistent/edgecloud"))

    proc = subprocess.run([systemd_analyze, "verify", str(broken)], capture_output=True, text=True,
                          timeout=120, check=False)

    assert proc.returncode != 0 and "/nonexistent/edgecloud" in proc.stderr
