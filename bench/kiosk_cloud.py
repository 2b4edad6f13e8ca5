"""The benchmark's cloud: ``bench.fake_cloud`` in its own process, with a tiny control API.

Why a subprocess and not ``run_fake_cloud_in_thread``: the benchmark client, the fake cloud and the
gateway all share two cores. In one process the client's event loop and the fake's would share one
GIL, so a busy client would delay the fake's "first token" and the all-cloud figures would include
the benchmark's own overhead. In its own process the fake only pays for the CPU it really uses.

The control API (loopback only, under ``/_bench/``) lets the driver read the fake's counters and
zero them between strategies; every other path goes to the unchanged fake app.

Run as ``python -m bench.kiosk_cloud CONFIG_JSON``; it prints ``PORT <n>`` once it accepts requests.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.fake_cloud import FakeCloudConfig, FakeCloudState, create_fake_cloud

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


def state_counters(state: FakeCloudState) -> dict[str, Any]:
    """The fake's counters as plain JSON (request bodies reduced to what billing needs)."""
    return {
        "chat_attempts": state.chat_attempts,
        "completed_streams": state.completed_streams,
        "disconnects": state.disconnects,
        "faults_served": state.faults_served,
        "connections": state.connections,
    }


def with_control(app: ASGIApp, config: FakeCloudConfig, state: FakeCloudState) -> ASGIApp:
    """Wrap the fake: ``GET /_bench/state`` and ``POST /_bench/reset``; everything else passes through."""

    async def wrapped(scope: Scope, receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not path.startswith("/_bench/"):
            await app(scope, receive, send)
            return
        if path == "/_bench/reset" and scope["method"] == "POST":
            state.reset()
            body: dict[str, Any] = {"reset": True}
        elif path == "/_bench/state":
            body = {"state": state_counters(state), "config": asdict(config)}
        else:
            body = {"error": "unknown control path"}
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})

    return wrapped


@dataclass
class CloudProcess:
    """A running fake-cloud subprocess."""

    process: subprocess.Popen[str]
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def counters(self) -> dict[str, Any]:
        return httpx.get(f"http://127.0.0.1:{self.port}/_bench/state", timeout=10).json()["state"]

    def reset(self) -> None:
        httpx.post(f"http://127.0.0.1:{self.port}/_bench/reset", timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def start_cloud_process(config: FakeCloudConfig, timeout_s: float = 30.0) -> CloudProcess:
    """Start ``python -m bench.kiosk_cloud`` and wait for its ``PORT`` line."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.kiosk_cloud", json.dumps(asdict(config))],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
        cwd=str(Path(__file__).resolve().parent.parent),
    )
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("PORT "):
            return CloudProcess(proc, int(line.split()[1]))
    proc.kill()
    raise RuntimeError("the fake cloud process did not start")


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    parser = argparse.ArgumentParser(description="fake cloud for the kiosk benchmark")
    parser.add_argument("config_json", help="FakeCloudConfig fields as a JSON object")
    args = parser.parse_args(argv)
    fields = json.loads(args.config_json)
    config = FakeCloudConfig(**fields)
    state = FakeCloudState()
    app = with_control(create_fake_cloud(config, state), config, state)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="off", access_log=False,
                                           timeout_keep_alive=120, http="h11", backlog=1024))

    async def announce_when_started() -> None:
        import asyncio

        while not server.started:
            await asyncio.sleep(0.01)
        print(f"PORT {port}", flush=True)

    import asyncio

    async def run() -> None:
        task = asyncio.create_task(announce_when_started())
        await server.serve(sockets=[sock])
        task.cancel()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
