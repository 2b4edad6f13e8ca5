"""Start the real gateway (``python -m edge.cli serve``) as a subprocess for a benchmark.

The gateway runs exactly as on a kiosk: its own process, its own event loop, the config loaded
from a TOML file, so the benchmark measures the product and not an in-process test double. The
config is generated into a temporary data directory; the admin token is random per run and never
printed.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.local_run import free_port, render_toml

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FAQ = REPO_ROOT / "edge" / "cache" / "sample_faq.json"


@dataclass
class GatewayOptions:
    """What the benchmark sets on the gateway; everything else keeps the product's defaults."""

    cloud_base_url: str
    data_dir: Path
    faq_paths: list[Path] = field(default_factory=lambda: [DEFAULT_FAQ])
    hedge: bool = True
    intent_model_dir: Path | None = None  # None: the classifier shipped in the package
    # The kiosk fleet's pool to the cloud: large enough that 64 kiosks never queue for a connection.
    cloud_max_connections: int = 128
    edge_max_queue: int = 8
    n_threads: int | None = None
    price_input_per_mtok: float = 0.15
    price_output_per_mtok: float = 0.60
    cloud_model: str = "fake-gpt"
    log_level: str = "WARNING"

    def tree(self, admin_token: str) -> dict[str, Any]:
        edge: dict[str, Any] = {"max_queue": self.edge_max_queue}
        if self.n_threads:
            edge["n_threads"] = self.n_threads
        return {
            "server": {"host": "127.0.0.1", "data_dir": str(self.data_dir), "admin_token": admin_token},
            "edge": edge,
            "router": {"hedge": self.hedge,
                       **({"intent_model_dir": str(self.intent_model_dir)} if self.intent_model_dir else {})},
            "cache": {"enabled": True, "faq_paths": [str(p) for p in self.faq_paths]},
            "logging": {"level": self.log_level, "json_logs": True},
            "cloud": {"warmup": True, "providers": [{
                "name": "fake", "base_url": self.cloud_base_url, "model": self.cloud_model,
                "http2": False, "max_connections": self.cloud_max_connections,
                "price_input_per_mtok": self.price_input_per_mtok,
                "price_output_per_mtok": self.price_output_per_mtok,
            }]},
        }


@dataclass
class GatewayProcess:
    process: subprocess.Popen[bytes]
    port: int
    admin_token: str
    config_path: Path
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def admin_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.admin_token}"}

    def purge_cache(self) -> dict[str, Any]:
        """``POST /admin/cache/purge`` with an empty body: every stored answer goes, the FAQ pack stays."""
        resp = httpx.post(self.base_url + "/admin/cache/purge", headers=self.admin_headers(), timeout=30)
        resp.raise_for_status()
        return resp.json()

    def cache_stats(self) -> dict[str, Any]:
        resp = httpx.get(self.base_url + "/admin/cache/stats", headers=self.admin_headers(), timeout=30)
        return resp.json() if resp.status_code == 200 else {"status": resp.status_code}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def start_gateway(options: GatewayOptions, ready_timeout_s: float = 180.0) -> GatewayProcess:
    """Write the config, start ``edge.cli serve``, wait until ``/readyz`` says the model is loaded."""
    options.data_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(24)
    config_path = options.data_dir / "gateway.toml"
    config_path.write_text(render_toml(options.tree(token)), encoding="utf-8")
    os.chmod(config_path, 0o600)  # it holds the admin token
    port = free_port()
    log_path = options.data_dir / "gateway.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGECLOUD_")}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "edge.cli", "serve", "--config", str(config_path), "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO_ROOT),
        )
    gateway = GatewayProcess(proc, port, token, config_path, log_path)
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the gateway exited with {proc.returncode}; see {log_path}")
        try:
            resp = httpx.get(gateway.base_url + "/readyz", timeout=2)
            if resp.status_code == 200:
                return gateway
            if resp.status_code == 503 and resp.json().get("status") == "failed":
                gateway.stop()
                raise RuntimeError(f"the gateway's model failed to load: {resp.json().get('error')}")
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    gateway.stop()
    raise RuntimeError(f"the gateway was not ready within {ready_timeout_s:.0f} s; see {log_path}")
