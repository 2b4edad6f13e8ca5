"""The tegrastats parser on real lines from JetPack 5 and 6, and the sampler against a fake on PATH."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from pathlib import Path

import pytest

from edge.observability import Observability
from edge.observability.device import DeviceSampler, parse_tegrastats
from edge.observability.web import dashboard_data

from .helpers import make_settings, metric_values, value

# AGX Orin, JetPack 5.1 (L4T 35.x): upper-case sensors, -256C for absent ones, no VDD_IN rail.
JP5_AGX_ORIN = (
    "04-24-2023 00:01:24 RAM 1282/62795MB (lfb 15152x4MB) SWAP 0/31398MB (cached 0MB) "
    "CPU [0%@729,0%@729,0%@729,0%@729,0%@729,0%@729,0%@729,0%@729,0%@729,0%@729,0%@729,0%@729] "
    "EMC_FREQ 0%@2133 GR3D_FREQ 0%@0 GR3D2_FREQ 0%@0 VIC_FREQ 729 APE 174 CV0@-256C CPU@42.593C "
    "Tboard@32C SOC2@39.343C Tdiode@33.25C SOC0@39.375C CV1@-256C GPU@-256C tj@42.593C SOC1@40.468C "
    "CV2@-256C VDD_GPU_SOC 2399mW/2399mW VDD_CPU_CV 400mW/400mW VIN_SYS_5V0 4032mW/4032mW NC 0mW/0mW "
    "VDDQ_VDD2_1V8AO 301mW/301mW NC 0mW/0mW"
)
# Orin NX / Nano, JetPack 6 (L4T 36.x): lower-case sensors, bracketed GPU frequency, VDD_IN rail.
JP6_ORIN = (
    "10-08-2026 04:35:02 RAM 6712/7620MB (lfb 12x4MB) SWAP 369/3810MB (cached 8MB) "
    "CPU [38%@1497,2%@729,1%@729,0%@729,1%@729,0%@729] EMC_FREQ 61%@2133 GR3D_FREQ 99%@[612] "
    "NVDEC off NVJPG off VIC off OFA off APE 200 cpu@57.125C soc2@55.093C soc0@56.625C gpu@58.625C "
    "tj@58.312C soc1@55.937C VDD_IN 16321mW/11204mW VDD_CPU_GPU_CV 7104mW/4944mW VDD_SOC 3120mW/3659mW"
)
# Nano / TX2, JetPack 4 (L4T 32.x), as commonly documented: rails in mW without the unit.
JP4_NANO = (
    "RAM 2345/3964MB (lfb 1x4MB) SWAP 123/4096MB (cached 0MB) CPU [25%@1479,30%@1479,20%@1479,35%@1479] "
    "EMC_FREQ 0%@1600 GR3D_FREQ 50%@921 APE 25 PLL@41C CPU@42.5C PMIC@100C GPU@40C AO@44.5C thermal@41.5C "
    "POM_5V_IN 4567/4567 POM_5V_GPU 1234/1234 POM_5V_CPU 890/890"
)



async def _first_tegra_line(obs: Observability) -> None:
    """Wait (up to ~4 s) until the tegrastats reader has parsed its first line."""
    for _ in range(200):
        if obs.device.snapshot.tegra is not None:
            return
        await asyncio.sleep(0.02)

def test_jetpack6_orin_line() -> None:
    s = parse_tegrastats(JP6_ORIN)
    assert s is not None
    assert (s.ram_used_mb, s.ram_total_mb, s.swap_used_mb) == (6712, 7620, 369)
    assert s.cpu_load_percent == [38.0, 2.0, 1.0, 0.0, 1.0, 0.0]
    assert s.gpu_load_percent == 99.0 and s.gpu_freq_mhz == 612
    assert s.emc_load_percent == 61.0
    assert s.temperatures_c == {
        "cpu": 57.125, "soc2": 55.093, "soc0": 56.625, "gpu": 58.625, "tj": 58.312, "soc1": 55.937,
    }
    assert s.power_mw == {"VDD_IN": 16321, "VDD_CPU_GPU_CV": 7104, "VDD_SOC": 3120}
    assert s.power_avg_mw["VDD_IN"] == 11204
    assert s.total_power_mw == 16321


def test_jetpack5_agx_orin_line_skips_absent_sensors_and_nc_rails() -> None:
    s = parse_tegrastats(JP5_AGX_ORIN)
    assert s is not None
    assert s.ram_total_mb == 62795 and len(s.cpu_load_percent) == 12
    assert s.gpu_load_percent == 0.0
    assert "gpu" not in s.temperatures_c and "cv0" not in s.temperatures_c  # -256C: not fitted
    assert s.temperatures_c["cpu"] == 42.593 and s.temperatures_c["tj"] == 42.593
    assert s.temperatures_c["tboard"] == 32.0
    assert "NC" not in s.power_mw
    assert s.power_mw["VIN_SYS_5V0"] == 4032
    assert s.total_power_mw == 2399 + 400 + 4032 + 301  # no VDD_IN: the sum of the measured rails


def test_jetpack4_rails_without_unit() -> None:
    s = parse_tegrastats(JP4_NANO)
    assert s is not None
    assert s.gpu_load_percent == 50.0 and s.gpu_freq_mhz == 921
    assert s.temperatures_c["gpu"] == 40.0 and s.temperatures_c["thermal"] == 41.5
    assert s.power_mw == {"POM_5V_IN": 4567, "POM_5V_GPU": 1234, "POM_5V_CPU": 890}
    assert s.total_power_mw == 4567


def test_offline_cores_and_gr3d_without_frequency() -> None:
    s = parse_tegrastats("RAM 1024/7900MB CPU [12%@729,off] GR3D_FREQ 42% cpu@48.5C")
    assert s is not None
    assert s.cpu_load_percent == [12.0, None]
    assert s.gpu_load_percent == 42.0 and s.gpu_freq_mhz is None
    assert s.total_power_mw is None


def test_not_a_tegrastats_line() -> None:
    assert parse_tegrastats("") is None
    assert parse_tegrastats("tegrastats: permission denied") is None


def _fake_tegrastats(bin_dir: Path, line: str) -> None:
    """A ``tegrastats`` executable that prints a real line every 50 ms, like the real one."""
    script = bin_dir / "tegrastats"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys, time\n"
        f"line = {line!r}\n"
        "while True:\n"
        "    print(line, flush=True)\n"
        "    time.sleep(0.05)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_sampler_follows_fake_tegrastats_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tegrastats(tmp_path, JP6_ORIN)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    settings = make_settings(tmp_path / "data", tegrastats_cmd=["tegrastats", "--interval", "50"])
    obs = Observability(settings)

    async def run() -> None:
        await obs.start()
        try:
            await _first_tegra_line(obs)
        finally:
            await obs.aclose()

    asyncio.run(run())
    snap = obs.device.snapshot
    assert snap.tegra is not None and snap.tegra.gpu_load_percent == 99.0
    assert snap.cpu_percent is not None and snap.memory_total_bytes
    assert obs.device._proc is None  # the child was stopped on close
    values = metric_values(obs.render_metrics()[0].decode())
    assert value(values, "edgecloud_device_gpu_load_percent") == 99.0
    assert value(values, "edgecloud_device_temperature_celsius", sensor="gpu") == 58.625
    assert value(values, "edgecloud_device_power_watts", rail="VDD_IN") == pytest.approx(16.321)
    assert value(values, "edgecloud_device_input_power_watts") == pytest.approx(16.321)
    assert value(values, "edgecloud_device_memory_total_bytes") > 0
    assert dashboard_data(obs)["device"]["tegra"]["temperatures_c"]["tj"] == 58.312


def test_no_tegrastats_means_psutil_only(tmp_path: Path) -> None:
    sampler = DeviceSampler(["edgecloud-no-such-tegrastats"], interval_s=0.05)

    async def run() -> None:
        await sampler.start()
        await sampler.aclose()

    asyncio.run(run())
    assert sampler.snapshot.tegrastats == "absent"
    assert sampler.snapshot.tegra is None
    assert sampler.snapshot.memory_used_bytes and sampler.snapshot.memory_used_bytes > 0


def test_a_dying_tegrastats_is_started_again(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    script = tmp_path / "short-tegrastats"
    script.write_text(
        f"#!{sys.executable}\n"
        f"open({str(starts)!r}, 'a').write('x')\n"
        f"print({JP5_AGX_ORIN!r}, flush=True)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    sampler = DeviceSampler([str(script)], interval_s=5.0)
    sampler.restart_s = 0.05

    async def run() -> None:
        await sampler.start()
        try:
            for _ in range(300):
                if starts.exists() and len(starts.read_text()) >= 3:
                    break
                await asyncio.sleep(0.02)
        finally:
            await sampler.aclose()

    asyncio.run(run())
    assert len(starts.read_text()) >= 3
    assert sampler.snapshot.tegra is not None and sampler.snapshot.tegra.temperatures_c["cpu"] == 42.593


def _fake_sysfs(root: Path, oc_events: int, trip_mc: int = 99000) -> None:
    """An Orin's throttling files: the junction zone's trip points and an INA3221 counter."""
    zone = root / "class/thermal/thermal_zone8"
    zone.mkdir(parents=True, exist_ok=True)
    (zone / "type").write_text("tj-thermal\n")
    (zone / "trip_point_0_type").write_text("passive\n")
    (zone / "trip_point_0_temp").write_text(f"{trip_mc}\n")
    (zone / "trip_point_1_type").write_text("critical\n")
    (zone / "trip_point_1_temp").write_text("104500\n")
    other = root / "class/thermal/thermal_zone0"
    other.mkdir(parents=True, exist_ok=True)
    (other / "type").write_text("cpu-thermal\n")
    (other / "trip_point_0_type").write_text("passive\n")
    (other / "trip_point_0_temp").write_text("50000\n")
    hwmon = root / "class/hwmon/hwmon3"
    hwmon.mkdir(parents=True, exist_ok=True)
    (hwmon / "oc1_event_cnt").write_text(f"{oc_events}\n")
    (hwmon / "oc2_event_cnt").write_text("1\n")


def test_junction_temperature_and_throttling_on_metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tegrastats(tmp_path, JP6_ORIN)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    sysfs = tmp_path / "sys"
    _fake_sysfs(sysfs, oc_events=3)
    settings = make_settings(tmp_path / "data", tegrastats_cmd=["tegrastats", "--interval", "50"])
    obs = Observability(settings)
    obs.device.sysfs_root = sysfs

    async def run() -> tuple[dict, dict]:
        await obs.start()
        try:
            await _first_tegra_line(obs)
            await obs.device.sample_once()
            calm = metric_values(obs.render_metrics()[0].decode())
            (sysfs / "class/hwmon/hwmon3/oc1_event_cnt").write_text("5\n")  # the module cut its clocks
            await obs.device.sample_once()
            return calm, metric_values(obs.render_metrics()[0].decode())
        finally:
            await obs.aclose()

    calm, cut = asyncio.run(run())
    assert value(calm, "edgecloud_device_junction_temperature_celsius") == 58.312
    assert value(calm, "edgecloud_device_junction_throttle_celsius") == 99.0  # tj zone, not the cpu one
    assert value(calm, "edgecloud_device_overcurrent_events_total") == 4.0
    assert value(calm, "edgecloud_device_throttled") == 0.0
    assert value(cut, "edgecloud_device_overcurrent_events_total") == 6.0
    assert value(cut, "edgecloud_device_throttled") == 1.0
    assert dashboard_data(obs)["device"]["throttled"] is True


def test_at_the_junction_trip_point_the_device_counts_as_throttled(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    _fake_sysfs(sysfs, oc_events=0, trip_mc=58000)
    sampler = DeviceSampler(["tegrastats"], sysfs_root=sysfs)
    sampler.jetson = True
    sampler.snapshot.tegra = parse_tegrastats(JP6_ORIN)  # tj@58.312C

    asyncio.run(sampler.sample_once())

    assert sampler.snapshot.throttled is True and sampler.snapshot.tj_throttle_c == 58.0


def test_throttle_files_are_not_read_off_a_jetson(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    _fake_sysfs(sysfs, oc_events=7)
    sampler = DeviceSampler(["edgecloud-no-such-tegrastats"], interval_s=0.05, sysfs_root=sysfs)

    async def run() -> None:
        await sampler.start()
        await sampler.aclose()

    asyncio.run(run())
    snap = sampler.snapshot
    assert (snap.overcurrent_events, snap.tj_throttle_c, snap.throttled) == (None, None, None)
