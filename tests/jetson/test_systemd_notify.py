"""The gateway's systemd notify protocol against a real unix datagram socket.

What systemd itself does with the messages (count the unit started on READY=1, restart it when
the WATCHDOG=1 pings stop) is played by a small supervisor here, since this machine has no
systemd as PID 1; the unit file's ``Type=notify``/``WatchdogSec`` lines are checked with
``systemd-analyze verify`` in test_jetson_parts.py.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from edge.systemd_notify import Liveness, Notifier, watchdog_period_s
from harness import free_port, make_settings, run_gateway

REPO = Path(__file__).resolve().parents[2]
HANG_SITE = Path(__file__).resolve().with_name("hang_site")


@dataclass
class NotifySocket:
    """A bound datagram socket standing in for systemd's notify socket; keeps every message."""

    path: Path
    sock: socket.socket = field(init=False)
    messages: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.sock.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            for line in data.decode().splitlines():
                self.messages.append((time.monotonic(), line))

    def wait_for(self, text: str, timeout: float, after: float = 0.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, line in list(self.messages):
                if at >= after and line.startswith(text):
                    return at
            time.sleep(0.02)
        raise AssertionError(f"no {text!r} within {timeout}s; got {[m for _, m in self.messages][-20:]}")

    def count(self, text: str, since: float) -> int:
        return sum(1 for at, line in list(self.messages) if at >= since and line == text)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[NotifySocket]:
    # A short path: sun_path holds 108 bytes and pytest's tmp paths can be long.
    short = Path(f"/tmp/ecn-{os.getpid()}-{time.monotonic_ns()}.sock")
    sock = NotifySocket(short)
    yield sock
    sock.close()
    short.unlink(missing_ok=True)


# --- the protocol pieces ------------------------------------------------------------------


def test_no_notify_socket_means_no_op() -> None:
    assert Notifier.from_environ({}) is None
    assert Notifier.from_environ({"NOTIFY_SOCKET": "relative/path"}) is None


def test_sends_datagrams_to_a_path_and_to_an_abstract_socket(notify_socket: NotifySocket) -> None:
    by_path = Notifier.from_environ({"NOTIFY_SOCKET": str(notify_socket.path)})
    assert by_path is not None and by_path.send("READY=1", "STATUS=ok")
    notify_socket.wait_for("READY=1", 2)
    notify_socket.wait_for("STATUS=ok", 2)

    name = f"edgecloud-test-{os.getpid()}"
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    abstract.bind("\0" + name)
    try:
        notifier = Notifier.from_environ({"NOTIFY_SOCKET": "@" + name})
        assert notifier is not None and notifier.send("WATCHDOG=1")
        assert abstract.recv(100) == b"WATCHDOG=1"
    finally:
        abstract.close()


def test_a_missing_socket_is_reported_not_raised(tmp_path: Path) -> None:
    assert Notifier(str(tmp_path / "gone.sock")).send("READY=1") is False


def test_watchdog_period_is_only_for_the_named_process() -> None:
    assert watchdog_period_s({"WATCHDOG_USEC": "240000000"}, pid=42) == 240.0
    assert watchdog_period_s({"WATCHDOG_USEC": "240000000", "WATCHDOG_PID": "42"}, pid=42) == 240.0
    assert watchdog_period_s({"WATCHDOG_USEC": "240000000", "WATCHDOG_PID": "7"}, pid=42) is None
    assert watchdog_period_s({}, pid=42) is None
    assert watchdog_period_s({"WATCHDOG_USEC": "0"}, pid=42) is None


class Pending:
    """A heartbeat that never completes: the generation thread is busy or hung."""

    def done(self) -> bool:
        return False


def test_liveness_judges_by_the_last_sign_of_life() -> None:
    class Edge:
        ready = True
        progress_at = 100.0

        def heartbeat(self) -> Pending:
            return Pending()

    now = [100.5]
    live = Liveness(Edge(), stall_s=1.0, clock=lambda: now[0])
    assert live.check()
    now[0] = 101.6
    assert not live.check()

    # A stamp older than the start of watching (a long model load) is not held against the thread.
    now[0] = 500.0
    late = Liveness(Edge(), stall_s=1.0, clock=lambda: now[0])
    assert late.check()


# --- the real gateway ---------------------------------------------------------------------


def test_gateway_says_ready_with_readyz_and_pings_only_while_generation_is_alive(
    tmp_path: Path, notify_socket: NotifySocket, embedded_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify_socket.path))
    # 8 s: a ping every 2 s, silent after 4 s without life (room for a prefill on a loaded CI machine)
    monkeypatch.setenv("WATCHDOG_USEC", "8000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    settings = make_settings(tmp_path, cache={"enabled": False})

    with run_gateway(settings) as gw:
        ready_at = notify_socket.wait_for("READY=1", 60)
        assert httpx.get(gw.base_url + "/readyz", timeout=5).status_code == 200
        loading = [line for at, line in notify_socket.messages if at <= ready_at]
        assert loading[0] == "STATUS=loading the on-device model"
        notify_socket.wait_for("STATUS=ready: ", 5)

        # A real generation keeps the pings going.
        start = time.monotonic()
        reply = gw.openai(timeout=300).chat.completions.create(
            model="edgecloud-edge", messages=[{"role": "user", "content": "Count from one to twenty."}],
            max_tokens=24)
        assert reply.choices[0].message.content
        time.sleep(4.5)
        assert notify_socket.count("WATCHDOG=1", start) >= 2

        # The generation thread stops answering (a wedged CUDA call): the pings stop.
        gate = threading.Event()
        gw.services.edge._compute.call(gate.wait)
        silent_at = notify_socket.wait_for("STATUS=generation thread silent", 30, after=time.monotonic())
        time.sleep(2.5)
        assert notify_socket.count("WATCHDOG=1", silent_at) == 0

        # It recovers: the heartbeat runs and the pings resume.
        gate.set()
        notify_socket.wait_for("WATCHDOG=1", 30, after=time.monotonic())

    # The last word is the stop: no ping after it. (Waited for: the reader thread may still be behind.)
    stopped_at = notify_socket.wait_for("STOPPING=1", 10)
    time.sleep(0.3)
    assert notify_socket.count("WATCHDOG=1", stopped_at) == 0
    assert notify_socket.messages[-1][1] in ("STOPPING=1", "STATUS=stopping")


# --- a supervisor that acts as systemd does on a missed watchdog -------------------------------


@dataclass
class Supervisor:
    """Starts ``edgecloud serve`` the way systemd does for Type=notify + WatchdogSec, and restarts it
    (SIGABRT, then SIGKILL, as systemd's default WatchdogSignal) when the pings stop."""

    cmd: list[str]
    env: dict[str, str]
    notify: NotifySocket
    watchdog_s: float
    starts: int = 0
    watchdog_kills: int = 0
    proc: subprocess.Popen | None = None

    def start(self) -> float:
        self.starts += 1
        since = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self.notify.wait_for("READY=1", 90, after=since)

    def watch(self, until: float) -> bool:
        """True when the watchdog fired (and the service was killed) before ``until``."""
        while time.monotonic() < until:
            pings = [at for at, line in list(self.notify.messages) if line in ("WATCHDOG=1", "READY=1")]
            if pings and time.monotonic() - pings[-1] > self.watchdog_s:
                self.watchdog_kills += 1
                self.stop(signal.SIGABRT)
                return True
            time.sleep(0.05)
        return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@pytest.mark.slow
def test_a_hung_generation_thread_is_restarted_by_the_watchdog(
    tmp_path: Path, notify_socket: NotifySocket, embedded_model: Path
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HANG_SITE), str(REPO)]),
        "NOTIFY_SOCKET": str(notify_socket.path),
        "WATCHDOG_USEC": "6000000",  # 6 s: pings every 1.5 s; silent after 3 s without life
        "EDGECLOUD_CACHE_ENABLED": "false",
    }
    env.pop("WATCHDOG_PID", None)
    cmd = [sys.executable, "-m", "edge.cli", "serve", "--port", str(port), "--data-dir", str(tmp_path / "data")]
    sup = Supervisor(cmd, env, notify_socket, watchdog_s=6.0)
    base = f"http://127.0.0.1:{port}"
    try:
        sup.start()
        assert not sup.watch(time.monotonic() + 7.0), "an idle gateway must keep pinging"

        def hung_request() -> None:
            body = {"model": "edgecloud-edge", "max_tokens": 8,
                    "messages": [{"role": "user", "content": "HANG-THE-GPU please"}]}
            try:
                httpx.post(base + "/v1/chat/completions", json=body, timeout=120)
            except httpx.HTTPError:
                pass  # the process is killed under it

        threading.Thread(target=hung_request, daemon=True).start()
        assert sup.watch(time.monotonic() + 60), "the watchdog did not fire on a hung generation thread"
        assert any(line.startswith("STATUS=generation thread silent") for _, line in notify_socket.messages)

        sup.start()  # Restart=on-failure
        reply = httpx.post(base + "/v1/chat/completions", timeout=300, json={
            "model": "edgecloud-edge", "max_tokens": 8, "messages": [{"role": "user", "content": "Hello"}]})
        assert reply.status_code == 200, reply.text
        assert (sup.starts, sup.watchdog_kills) == (2, 1)
    finally:
        sup.stop()
