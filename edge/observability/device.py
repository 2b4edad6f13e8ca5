"""Device health: CPU and memory from psutil, and on a Jetson GPU load, temperatures and power
from ``tegrastats``.

A kiosk that overheats or runs out of memory slows the edge model long before it fails, so the
operator needs these next to the latency figures. ``tegrastats`` is the one tool every JetPack
ships; its line format differs between releases (JetPack 5 prints ``CPU@46.1C`` and rails such
as ``VDD_GPU_SOC`` on AGX Orin, JetPack 6 prints ``cpu@44.1C`` and ``VDD_IN``; sensors that are
not fitted read ``-256C``), so the parser reads each field independently and skips what is
absent. The sampler runs ``tegrastats`` as a child process (argument list, no shell) and keeps
only the latest line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from .throttle import read_throttle

log = logging.getLogger(__name__)

_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB")
_SWAP = re.compile(r"\bSWAP (\d+)/(\d+)MB")
_CPU = re.compile(r"\bCPU \[([^\]]*)\]")
_GR3D = re.compile(r"\bGR3D_FREQ (\d+)%(?:@\[?([\d,]+)\]?)?")
_EMC = re.compile(r"\bEMC_FREQ (\d+)%")
_TEMP = re.compile(r"\b([A-Za-z][A-Za-z0-9_]*)@(-?\d+(?:\.\d+)?)C\b")
# JetPack 5/6 print "NAME 1234mW/1300mW"; JetPack 4 printed "NAME 1234/1300" without the unit.
_RAIL = re.compile(r"\b((?:VDD|VIN|POM|NC)[A-Za-z0-9_]*) (\d+)(?:mW)?/(\d+)(?:mW)?\b")
ABSENT_SENSOR_C = -256.0
TEGRASTATS_RESTART_S = 30.0


@dataclass
class TegraSample:
    """One parsed ``tegrastats`` line; temperatures in °C, power in mW (instant and running average)."""

    ram_used_mb: int | None = None
    ram_total_mb: int | None = None
    swap_used_mb: int | None = None
    swap_total_mb: int | None = None
    cpu_load_percent: list[float | None] = field(default_factory=list)  # None: core powered off
    gpu_load_percent: float | None = None
    gpu_freq_mhz: int | None = None
    emc_load_percent: float | None = None
    temperatures_c: dict[str, float] = field(default_factory=dict)
    power_mw: dict[str, int] = field(default_factory=dict)
    power_avg_mw: dict[str, int] = field(default_factory=dict)

    @property
    def junction_c(self) -> float | None:
        """The SoC junction temperature (``tj``), the one the throttling trip points refer to."""
        return self.temperatures_c.get("tj")

    @property
    def total_power_mw(self) -> int | None:
        """Module input power: VDD_IN where the board has it, else the sum of the measured rails."""
        if "VDD_IN" in self.power_mw:
            return self.power_mw["VDD_IN"]
        if "POM_5V_IN" in self.power_mw:
            return self.power_mw["POM_5V_IN"]
        rails = [v for k, v in self.power_mw.items() if not k.startswith("NC")]
        return sum(rails) if rails else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["total_power_mw"] = self.total_power_mw
        data["junction_c"] = self.junction_c
        return data


def parse_tegrastats(line: str) -> TegraSample | None:
    """Parse one line; None when it does not look like ``tegrastats`` output at all."""
    s = TegraSample()
    if m := _RAM.search(line):
        s.ram_used_mb, s.ram_total_mb = int(m[1]), int(m[2])
    if m := _SWAP.search(line):
        s.swap_used_mb, s.swap_total_mb = int(m[1]), int(m[2])
    if m := _CPU.search(line):
        for core in m[1].split(","):
            core = core.strip()
            if not core:
                continue
            if core == "off":
                s.cpu_load_percent.append(None)
                continue
            load = re.match(r"(\d+)%", core)
            s.cpu_load_percent.append(float(load[1]) if load else None)
    if m := _GR3D.search(line):
        s.gpu_load_percent = float(m[1])
        if m[2]:
            freqs = [int(f) for f in m[2].split(",") if f]
            s.gpu_freq_mhz = max(freqs) if freqs else None
    if m := _EMC.search(line):
        s.emc_load_percent = float(m[1])
    for name, value in _TEMP.findall(line):
        temp = float(value)
        if temp <= ABSENT_SENSOR_C:
            continue
        s.temperatures_c[name.lower()] = temp
    for name, now, avg in _RAIL.findall(line):
        if name.startswith("NC"):
            continue  # "not connected" placeholder rails on AGX Orin
        s.power_mw[name] = int(now)
        s.power_avg_mw[name] = int(avg)
    if s.ram_total_mb is None and s.gpu_load_percent is None and not s.power_mw and not s.temperatures_c:
        return None
    return s


@dataclass
class DeviceSnapshot:
    """What the metrics and the dashboard show about the device."""

    sampled_at: float = 0.0
    cpu_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    memory_percent: float | None = None
    tegra: TegraSample | None = None
    tegra_at: float | None = None
    tegrastats: str = "absent"  # "absent" | "running" | "stopped"
    # Jetson only (sysfs): over-current throttle events so far, the junction's throttling point,
    # and whether the module throttled since the previous sample (or runs at/above that point).
    overcurrent_events: int | None = None
    tj_throttle_c: float | None = None
    throttled: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tegra"] = self.tegra.to_dict() if self.tegra else None
        return data


def _psutil_sample() -> tuple[float, int, int, float]:
    mem = psutil.virtual_memory()
    return psutil.cpu_percent(interval=None), int(mem.used), int(mem.total), float(mem.percent)


class DeviceSampler:
    """Samples psutil every ``interval_s`` (in a worker thread) and follows ``tegrastats`` if present."""

    def __init__(self, tegrastats_cmd: list[str], interval_s: float = 5.0, sysfs_root: Path = Path("/sys")) -> None:
        self.tegrastats_cmd = list(tegrastats_cmd)
        self.sysfs_root = sysfs_root
        self.jetson = False  # decided in start(): tegrastats on PATH
        self.interval_s = max(0.05, float(interval_s))
        self.restart_s = TEGRASTATS_RESTART_S
        self.snapshot = DeviceSnapshot()
        self._tasks: list[asyncio.Task[None]] = []
        self._proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        psutil.cpu_percent(interval=None)  # primes the counter: the first real reading is then meaningful
        self.jetson = bool(self.tegrastats_cmd and shutil.which(self.tegrastats_cmd[0]))
        await self.sample_once()
        self._tasks.append(asyncio.create_task(self._psutil_loop(), name="device-psutil"))
        if self.jetson:
            self._tasks.append(asyncio.create_task(self._tegrastats_loop(), name="device-tegrastats"))

    async def sample_once(self) -> None:
        cpu, used, total, pct = await asyncio.to_thread(_psutil_sample)
        snap = self.snapshot
        snap.sampled_at, snap.cpu_percent = time.time(), cpu
        snap.memory_used_bytes, snap.memory_total_bytes, snap.memory_percent = used, total, pct
        if self.jetson:
            self._sample_throttle(await asyncio.to_thread(read_throttle, self.sysfs_root))

    def _sample_throttle(self, reading: Any) -> None:
        snap = self.snapshot
        before = snap.overcurrent_events
        snap.overcurrent_events, snap.tj_throttle_c = reading.overcurrent_events, reading.tj_throttle_c
        tj = snap.tegra.junction_c if snap.tegra is not None else None
        hot = tj is not None and snap.tj_throttle_c is not None and tj >= snap.tj_throttle_c
        cut = before is not None and snap.overcurrent_events is not None and snap.overcurrent_events > before
        known = snap.overcurrent_events is not None or snap.tj_throttle_c is not None
        snap.throttled = (hot or cut) if known else None

    async def _psutil_loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.sample_once()
            except Exception:  # a failed reading must not end the sampler
                log.exception("psutil sample failed")

    async def _tegrastats_loop(self) -> None:
        """Follow ``tegrastats``; if it dies (a JetPack upgrade, an OOM kill), start it again later."""
        while True:
            try:
                await self._follow_tegrastats()
            except Exception:  # an over-long line, a read error: log it, kill the child, restart later
                log.exception("reading tegrastats failed")
                await self._stop_proc()
            self.snapshot.tegrastats = "stopped"
            await asyncio.sleep(self.restart_s)

    async def _follow_tegrastats(self) -> None:
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.tegrastats_cmd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError as exc:
            log.warning("tegrastats could not start: %s", exc)
            return
        self.snapshot.tegrastats = "running"
        assert self._proc.stdout is not None
        while True:
            raw = await self._proc.stdout.readline()
            if not raw:
                break
            sample = parse_tegrastats(raw.decode("utf-8", "replace"))
            if sample is not None:
                self.snapshot.tegra, self.snapshot.tegra_at = sample, time.time()
        await self._proc.wait()
        log.warning("tegrastats exited with %s", self._proc.returncode)
        self._proc = None

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        await self._stop_proc()

    async def _stop_proc(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 5.0)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        self._proc = None
