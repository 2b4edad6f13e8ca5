"""systemd's notify protocol for the gateway: READY=1 when ``/readyz`` would say ready, and
WATCHDOG=1 only while the generation thread is proven alive.

Why: under ``Type=notify`` systemd counts the service as started only when it says READY=1, so
``TimeoutStartSec`` bounds the model load and ``systemctl start`` (and the installer) return when
the kiosk can really answer. ``WatchdogSec`` restarts a gateway whose generation thread hangs (a
wedged CUDA context blocks in a kernel launch for ever while the HTTP side still answers), which
no HTTP health check from outside can tell from a long answer.

The protocol is one datagram per message to the unix socket named by ``NOTIFY_SOCKET`` (a path,
or ``@name`` for the abstract namespace), so this is plain socket code with no dependency. Without
``NOTIFY_SOCKET`` (tests, a developer's shell, any other supervisor) every call is a no-op.

Liveness: the generation thread stamps ``LocalModel.progress_at`` at each job start and each
token; when it is idle, a no-op heartbeat submitted to it stamps it too. A thread that neither
produced a token nor ran the heartbeat for ``stall_s`` is hung: the pings stop and systemd
restarts the service ``WatchdogSec`` after the last one. ``stall_s`` is half the watchdog period,
so one long prefill (no token until the whole prompt is evaluated) must stay under it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger("edgecloud.systemd")

# Pings per watchdog period: systemd advises at least two; four leaves room for a slow loop.
PINGS_PER_PERIOD = 4


@dataclass(frozen=True)
class Notifier:
    """Sends notify messages to one socket; never raises (a lost message must not stop the gateway)."""

    address: str | bytes

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Notifier | None:
        """The notifier systemd asked for, or None when the gateway is not run by systemd."""
        name = environ.get("NOTIFY_SOCKET", "")
        if not name:
            return None
        if name.startswith("@"):  # abstract namespace: a leading NUL byte on the wire
            return cls(b"\0" + name[1:].encode())
        if not name.startswith("/"):
            log.warning("NOTIFY_SOCKET=%r is neither a path nor @abstract: not notifying systemd", name)
            return None
        return cls(name)

    def send(self, *fields: str) -> bool:
        """One datagram with ``fields`` on separate lines; True when it was sent."""
        payload = "\n".join(fields).encode("utf-8")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(self.address)
                sock.sendall(payload)
        except OSError as exc:
            log.warning("systemd notify failed (%s): %s", fields[0] if fields else "", exc)
            return False
        return True


def watchdog_period_s(environ: Mapping[str, str], pid: int) -> float | None:
    """``WatchdogSec`` in seconds when systemd expects pings from this process, else None."""
    usec = environ.get("WATCHDOG_USEC", "")
    owner = environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if owner and (not owner.isdigit() or int(owner) != pid):
        return None  # meant for another process (e.g. a wrapper that exec'd us would have fixed it)
    return int(usec) / 1_000_000


class GenerationThread(Protocol):
    """What the watchdog needs from the local model."""

    progress_at: float

    @property
    def ready(self) -> bool: ...

    def heartbeat(self) -> asyncio.Future[Any]: ...


class Liveness:
    """Whether the generation thread showed a sign of life within ``stall_s``."""

    def __init__(self, edge: GenerationThread, stall_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.edge = edge
        self.stall_s = stall_s
        self.clock = clock
        # Judged from when watching began (the model just loaded), not from an older stamp.
        self.since = clock()
        self._beat: asyncio.Future[Any] | None = None

    def check(self) -> bool:
        """Queue a heartbeat unless one is still waiting, then judge by the newest sign of life."""
        if self._beat is None or self._beat.done():
            if self._beat is not None and not self._beat.cancelled() and self._beat.exception() is not None:
                log.error("generation heartbeat failed: %s", self._beat.exception())
            self._beat = self.edge.heartbeat()
        return self.clock() - max(self.edge.progress_at, self.since) < self.stall_s


class SystemdNotify:
    """The gateway's side of ``Type=notify`` + ``WatchdogSec``, started in the app's lifespan."""

    def __init__(self, services: Any, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.services = services
        self.notifier = Notifier.from_environ(env)
        self.period_s = watchdog_period_s(env, os.getpid()) if self.notifier else None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.notifier is not None:
            self._task = asyncio.create_task(self._run(self.notifier), name="systemd-notify")

    async def aclose(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        if self.notifier is not None:
            self.notifier.send("STOPPING=1", "STATUS=stopping")

    async def _run(self, notifier: Notifier) -> None:
        services = self.services
        edge = services.edge
        notifier.send("STATUS=loading the on-device model")
        if self.period_s is None:
            await services.loaded.wait()
            self._announce(notifier)
            return
        interval = self.period_s / PINGS_PER_PERIOD
        liveness: Liveness | None = None
        announced = False
        while True:
            if not announced and services.loaded.is_set():
                announced = True
                self._announce(notifier)
            if liveness is None and edge.ready:
                liveness = Liveness(edge, self.period_s / 2)
            if liveness is None or liveness.check():
                # While loading, TimeoutStartSec (not the watchdog) bounds the wait.
                notifier.send("WATCHDOG=1")
            else:
                stalled = time.monotonic() - max(edge.progress_at, liveness.since)
                log.error("generation thread silent for %.0f s: withholding the systemd watchdog ping", stalled)
                notifier.send(f"STATUS=generation thread silent for {stalled:.0f} s")
            if announced:
                await asyncio.sleep(interval)
            else:  # READY=1 as soon as the load ends, not at the next ping
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(services.loaded.wait(), interval)

    def _announce(self, notifier: Notifier) -> None:
        edge = self.services.edge
        if edge.ready:  # the condition /readyz answers 200 on
            notifier.send("READY=1", f"STATUS=ready: {edge.model.name}")
            log.info("told systemd the gateway is ready")
        else:
            # No READY=1: TimeoutStartSec ends this start and StartLimitBurst stops the restart loop.
            notifier.send(f"STATUS=the on-device model failed to load: {edge.load_error}")
