"""A fake Jetson for jetson/setup.sh: a root folder with board files, fake commands, a stub gateway.

What is real: bash, the installer and its sha256/sed/awk work, the unit files it renders,
health_probe.py's HTTP client. What is fake (cannot exist on CI): the board (device tree,
/etc/nv_tegra_release, CUDA), the Jetson tools, apt/systemd/useradd on the test machine, pip's
hour-long CUDA build, the internet. The stub gateway stands in for the systemd-started
``edgecloud serve`` on the board: it answers /readyz with 503 until the fake systemctl has
started edgecloud.service, then streams a short chat completion.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "jetson" / "setup.sh"
FAKES = Path(__file__).resolve().with_name("jetson_fakes.py")

FAKE_COMMANDS = (
    "nvpmodel", "jetson_clocks", "tegrastats", "systemctl", "dpkg-query", "apt-get",
    "add-apt-repository", "getent", "useradd", "userdel", "python3.10", "curl", "df",
    "fallocate", "mkswap", "swapon", "swapoff", "journalctl", "systemd-run",
)

# Calls that change a machine; a second run and a dry run must make none of them.
READ_ONLY_SYSTEMCTL = {"is-enabled", "is-active", "get-default"}


def is_mutating(call: dict[str, Any]) -> bool:
    cmd, argv = call["cmd"], call["argv"]
    if cmd in ("dpkg-query", "getent", "tegrastats", "df", "journalctl", "systemd-run"):
        return False  # systemd-run only runs the GPU proof, in a transient unit that goes away
    if cmd == "nvpmodel":
        return argv[:1] != ["-q"]
    if cmd == "systemctl":
        verbs = [a for a in argv if not a.startswith("--")]
        return verbs[0] not in READ_ONLY_SYSTEMCTL
    if cmd == "venv-python":
        # pip download only fills a temporary folder
        return argv[:3] == ["-m", "pip", "install"] or argv[:3] == ["-m", "pip", "uninstall"]
    if cmd == "venv-edgecloud":
        return "--help" not in argv
    return True


@dataclass(frozen=True)
class Board:
    """One simulated module + JetPack."""

    key: str
    l4t_release: str | None
    cuda_version: str | None
    model: str | None
    compatible: str | None
    mem_kb: int
    cpus: int
    nvpmodel_modes: tuple[tuple[int, str], ...]
    expected_module: str = ""
    expected_model_file: str = ""


NX16_MODES = ((0, "MAXN"), (1, "10W"), (2, "15W"), (3, "25W"))
NX8_MODES = ((0, "MAXN"), (1, "10W"), (2, "15W"), (3, "20W"))
# Cores online per mode (the rest: all of them); the factory mode 2 (15 W) keeps four.
MODE_CPUS = {"1": 4, "2": 4}

BOARDS = {
    "jp5-16gb": Board(
        key="jp5-16gb",
        l4t_release="# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, "
                    "DATE: Tue Aug  1 19:57:35 UTC 2023",
        cuda_version="11.4.315",
        model="NVIDIA Jetson Orin NX Engineering Reference Developer Kit",
        compatible="nvidia,p3768-0000+p3767-0000\0nvidia,p3767-0000\0nvidia,tegra234\0",
        mem_kb=15_655_000, cpus=8, nvpmodel_modes=NX16_MODES,
        expected_module="orin-nx-16gb", expected_model_file="Qwen2.5-7B-Instruct-Q4_K_M.gguf",
    ),
    "jp5-8gb": Board(
        key="jp5-8gb",
        l4t_release="# R35 (release), REVISION: 5.0, GCID: 35550185, BOARD: t186ref, EABI: aarch64, "
                    "DATE: Tue Feb 20 04:46:31 UTC 2024",
        cuda_version="11.4.315",
        model="NVIDIA Jetson Orin NX Engine Board",
        compatible=None,  # no SKU in the device tree: memory decides the size
        mem_kb=7_620_000, cpus=6, nvpmodel_modes=NX8_MODES,
        expected_module="orin-nx-8gb", expected_model_file="Qwen2.5-3B-Instruct-Q4_K_M.gguf",
    ),
    "jp6-16gb": Board(
        key="jp6-16gb",
        l4t_release="# R36 (release), REVISION: 3.0, GCID: 36191598, BOARD: generic, EABI: aarch64, "
                    "DATE: Mon May  6 17:34:21 UTC 2024",
        cuda_version="12.2.140",
        model="NVIDIA Jetson Orin NX Engine Board",
        compatible=None,
        mem_kb=15_655_000, cpus=8, nvpmodel_modes=NX16_MODES,
        expected_module="orin-nx-16gb", expected_model_file="Qwen2.5-7B-Instruct-Q4_K_M.gguf",
    ),
    "jp6-8gb": Board(
        key="jp6-8gb",
        l4t_release="# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, "
                    "DATE: Wed Jan  8 01:49:37 UTC 2025",
        cuda_version="12.6.68",
        model="NVIDIA Jetson Orin NX Engine Board",
        compatible="nvidia,p3768-0000+p3767-0001\0nvidia,p3767-0001\0nvidia,tegra234\0",
        mem_kb=7_620_000, cpus=6, nvpmodel_modes=NX8_MODES,
        expected_module="orin-nx-8gb", expected_model_file="Qwen2.5-3B-Instruct-Q4_K_M.gguf",
    ),
    "not-jetson": Board(
        key="not-jetson", l4t_release=None, cuda_version=None, model=None, compatible=None,
        mem_kb=32_000_000, cpus=2, nvpmodel_modes=(),
    ),
    "jp6-dp": Board(
        key="jp6-dp",
        l4t_release="# R36 (release), REVISION: 2.0, GCID: 35084178, BOARD: generic, EABI: aarch64, "
                    "DATE: Tue Dec 19 05:55:03 UTC 2023",
        cuda_version="12.2.140",
        model="NVIDIA Jetson Orin NX Engine Board",
        compatible=None, mem_kb=15_655_000, cpus=8, nvpmodel_modes=NX16_MODES,
    ),
}

JETPACK_BOARDS = ("jp5-16gb", "jp5-8gb", "jp6-16gb", "jp6-8gb")


class _GatewayHandler(BaseHTTPRequestHandler):
    server: _StubServer

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        return

    def _service_active(self) -> bool:
        state = json.loads(self.server.state_file.read_text())
        return "edgecloud.service" in state["active"]

    def do_GET(self) -> None:
        if self.path != "/readyz":
            self.send_error(404)
            return
        ready = self._service_active()
        body = json.dumps({"ready": ready}).encode()
        self.send_response(200 if ready else 503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length))
        self.server.requests.append(request)
        if self.path != "/v1/chat/completions" or not self._service_active():
            self.send_error(503)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        words = ["A", " kiosk", " helps", " visitors", " find", " their", " way", "."]
        for word in words:
            chunk = {"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            time.sleep(self.server.token_delay_s)
        usage = {"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": len(words)}}
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        self.wfile.flush()


class _StubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state_file: Path) -> None:
        super().__init__(("127.0.0.1", 0), _GatewayHandler)
        self.state_file = state_file
        self.requests: list[dict[str, Any]] = []
        self.token_delay_s = 0.01  # a slow board (or the CPU) streams slower


@dataclass
class FakeJetson:
    """A fake board in ``base`` and the means to run setup.sh against it."""

    base: Path
    board: Board
    root: Path = field(init=False)
    bin: Path = field(init=False)
    state_file: Path = field(init=False)
    log_file: Path = field(init=False)
    project: Path = field(init=False)
    gateway: _StubServer = field(init=False)
    models_conf: Path = field(init=False)

    def __post_init__(self) -> None:
        self.root = self.base / "root"
        self.bin = self.root / "fakebin"
        self.state_file = self.base / "state.json"
        self.log_file = self.base / "calls.jsonl"
        self.project = self.base / "project"
        self._build_root()
        self._write_fakes()
        self._write_state()
        self.project.mkdir()
        (self.project / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
        self.models_conf = self._write_models_conf()
        self.gateway = _StubServer(self.state_file)
        threading.Thread(target=self.gateway.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.gateway.server_address[1]

    def close(self) -> None:
        self.gateway.shutdown()
        self.gateway.server_close()

    def _write(self, rel: str, text: str, mode: int = 0o644) -> Path:
        path = self.root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)
        return path

    def _build_root(self) -> None:
        b = self.board
        if b.l4t_release:
            self._write("/etc/nv_tegra_release", b.l4t_release + "\n")
        if b.model:
            self._write("/proc/device-tree/model", b.model + "\0")
        if b.compatible:
            self._write("/proc/device-tree/compatible", b.compatible)
        self._write("/proc/meminfo", f"MemTotal:       {b.mem_kb} kB\nMemFree:        {b.mem_kb // 2} kB\n")
        online = MODE_CPUS.get("2", b.cpus) if b.nvpmodel_modes else b.cpus
        self._write("/proc/cpuinfo", "".join(f"processor\t: {i}\n\n" for i in range(min(online, b.cpus))))
        self._write("/proc/sys/kernel/random/boot_id", "0b7f3a6e-0000-4000-8000-000000000001\n")
        self._write("/proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n"
                                   "/dev/zram0\tpartition\t635040\t0\t5\n")
        self._write("/etc/fstab", "# <file system> <mount point> <type> <options> <dump> <pass>\n"
                                  "/dev/root / ext4 defaults 0 1\n")
        if b.cuda_version:
            version_json = {"cuda": {"name": "CUDA SDK", "version": b.cuda_version},
                            "cuda_nvcc": {"name": "CUDA NVCC", "version": b.cuda_version}}
            self._write("/usr/local/cuda/version.json", json.dumps(version_json, indent=3))
            major_minor = ".".join(b.cuda_version.split(".")[:2])
            self._write("/usr/local/cuda/bin/nvcc",
                        f"#!/bin/sh\necho 'Cuda compilation tools, release {major_minor}, V{b.cuda_version}'\n",
                        0o755)
            (self.root / "usr/local/cuda/lib64").mkdir(parents=True, exist_ok=True)
        if b.nvpmodel_modes:
            lines = [f"< POWER_MODEL ID={i} NAME={name} >\nCPU_ONLINE CORE_0 1\n" for i, name in b.nvpmodel_modes]
            self._write("/etc/nvpmodel.conf", "\n".join(lines) + "\n< PM_CONFIG DEFAULT=2 >\n")

    @property
    def model_content(self) -> bytes:
        return ("fake gguf for " + self.board.key).encode()

    def _write_models_conf(self) -> Path:
        """jetson/models.conf with every sha256 replaced by that of the fake download."""
        sha = hashlib.sha256(self.model_content).hexdigest()
        lines = []
        for line in (REPO / "jetson" / "models.conf").read_text().splitlines():
            if line and not line.startswith("#"):
                fields = line.split("|")
                fields[3] = sha
                line = "|".join(fields)
            lines.append(line)
        path = self.base / "models.conf"
        path.write_text("\n".join(lines) + "\n")
        return path

    def _write_fakes(self) -> None:
        self.bin.mkdir(parents=True, exist_ok=True)
        for name in FAKE_COMMANDS:
            script = self.bin / name
            script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "{FAKES}" {name} "$@"\n')
            script.chmod(0o755)

    def _write_state(self) -> None:
        modes = {str(i): name for i, name in self.board.nvpmodel_modes}
        state = {
            "power_mode": 2,
            "power_mode_names": modes,
            "enabled": ["nvpmodel.service", "nvzramconfig.service"],
            "active": ["nvpmodel.service", "nvzramconfig.service"],
            "default_target": "graphical.target",
            "packages": ["ca-certificates", "curl", "git"],
            "users": ["root"],
            "pip": [],
            "l4t_core_version": None,
            "clocks": "factory-dvfs",
            "mode_cpus": {k: min(v, self.board.cpus) for k, v in MODE_CPUS.items()},
            "max_cpus": self.board.cpus,
        }
        self.state_file.write_text(json.dumps(state))

    # --- running and inspecting ---------------------------------------------------------

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            "PATH": f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(self.base),
            "LANG": "C.UTF-8",
            "EDGECLOUD_SETUP_ROOT": str(self.root),
            "EDGECLOUD_PROJECT_DIR": str(self.project),
            "FAKE_STATE": str(self.state_file),
            "FAKE_ROOT": str(self.root),
            "FAKE_LOG": str(self.log_file),
            "FAKE_REAL_PYTHON": sys.executable,
            "FAKE_MODEL_CONTENT": self.model_content.decode(),
            "EDGECLOUD_MODELS_CONF": str(self.models_conf),
        }
        env.update(extra)
        return env

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        self.log_file.write_text("")
        return subprocess.run(
            ["bash", str(SETUP), *args], env=self.env(**env), capture_output=True, text=True,
            timeout=600, check=False, stdin=subprocess.DEVNULL,  # generous: CI machines are shared
        )

    def run_script(self, script: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """Another script of jetson/ (build-wheelhouse.sh) on this board."""
        self.log_file.write_text("")
        return subprocess.run(
            ["bash", str(script), *args], env=self.env(**env), capture_output=True, text=True,
            timeout=600, check=False, stdin=subprocess.DEVNULL,  # generous: CI machines are shared
        )

    def install(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """A real (non-dry) run with --yes on a free port; fails the test on a non-zero exit."""
        proc = self.run("--yes", "--port", str(self.port), *args, **env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def calls(self) -> list[dict[str, Any]]:
        text = self.log_file.read_text() if self.log_file.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line]

    def mutating_calls(self) -> list[dict[str, Any]]:
        return [c for c in self.calls() if is_mutating(c)]

    def state(self) -> dict[str, Any]:
        return json.loads(self.state_file.read_text())

    def update_state(self, **changes: Any) -> None:
        state = self.state()
        state.update(changes)
        self.state_file.write_text(json.dumps(state))

    def reboot(self) -> None:
        """What a reboot does here: a pending power mode applies, only enabled units run again."""
        from tests.jetson import jetson_fakes

        state = self.state()
        os.environ["FAKE_ROOT"] = str(self.root)
        try:
            if state.pop("reboot_requested", False):
                jetson_fakes.set_power_mode(state, state.pop("pending_reboot_mode"))
            else:
                state["clocks"] = f"mode{state['power_mode']}-dvfs"
        finally:
            del os.environ["FAKE_ROOT"]
        state["active"] = sorted(set(state["enabled"]))
        self.state_file.write_text(json.dumps(state))
        self.path("/proc/sys/kernel/random/boot_id").write_text(f"{uuid.uuid4()}\n")

    def snapshot(self) -> dict[str, str]:
        """Every file under the root with its sha256 (symlinks by target)."""
        out: dict[str, str] = {}
        for path in sorted(self.root.rglob("*")):
            rel = str(path.relative_to(self.root))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
        return out

    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")
