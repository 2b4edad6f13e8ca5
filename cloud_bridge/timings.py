"""Where the time of a cloud call went, phase by phase, from httpcore's ``trace`` extension.

Offsets are milliseconds from the start of the logical call, like ``curl -w`` (time_namelookup,
time_connect, time_appconnect, time_pretransfer, time_starttransfer): a later phase includes the
earlier ones, and a retry's waiting shows up in ``first_token_ms`` as the user felt it.

DNS: httpcore resolves inside ``connect_tcp`` and reports no separate event, so when a NEW
connection is about to be opened the trace callback resolves the host itself with a timed
``loop.getaddrinfo`` (cached for ``ttl_s`` per host, so it costs at most one extra lookup per TTL,
usually answered from the OS cache that our lookup just warmed). ``dns_ms`` is None when the call
reused a pooled connection or the host is an IP literal.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from dataclasses import dataclass
from typing import Any

import httpcore


@dataclass
class CallTimings:
    """Milliseconds from call start; None when not measured or not applicable."""

    dns_ms: float | None = None
    connect_ms: float | None = None
    tls_ms: float | None = None
    request_sent_ms: float | None = None
    first_byte_ms: float | None = None
    first_token_ms: float | None = None
    last_token_ms: float | None = None
    total_ms: float | None = None
    connection_reused: bool = False
    attempts: int = 0
    http_version: str = ""
    # Offset at which the attempt these phases belong to started (0 for a first-try success).
    attempt_start_ms: float = 0.0

    def durations(self) -> dict[str, float | None]:
        """Per-phase durations (not offsets), for the diagnose table and for logs."""
        start = self.attempt_start_ms
        marks = [
            ("dns", self.dns_ms),
            ("connect", self.connect_ms),
            ("tls", self.tls_ms),
            ("request_sent", self.request_sent_ms),
            ("first_byte", self.first_byte_ms),
            ("first_token", self.first_token_ms),
            ("last_token", self.last_token_ms),
        ]
        out: dict[str, float | None] = {}
        previous = start
        for name, mark in marks:
            if mark is None:
                out[name] = None
                continue
            out[name] = max(0.0, mark - previous)
            previous = mark
        out["total"] = None if self.total_ms is None else self.total_ms - start
        return out


class DnsCache:
    """Timed, briefly cached name resolution (one per bridge, created in its lifespan)."""

    def __init__(self, ttl_s: float = 60.0) -> None:
        self.ttl_s = ttl_s
        self._seen: dict[tuple[str, int], float] = {}

    async def resolve_timed(self, host: str, port: int, timeout_s: float | None = None) -> float | None:
        """Milliseconds the lookup took, 0.0 when cached, None for IP literals.

        Raises ``OSError`` when the name does not resolve and ``TimeoutError`` after ``timeout_s``
        (the connect timeout): a dead resolver must not stall a call beyond it.
        """
        try:
            ipaddress.ip_address(host)
            return None
        except ValueError:
            pass
        now = time.monotonic()
        key = (host, port)
        if now - self._seen.get(key, -1e9) < self.ttl_s:
            return 0.0
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        try:
            await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(f"DNS lookup of {host} took longer than {timeout_s}s") from None
        self._seen[key] = now
        return (time.perf_counter() - start) * 1000.0


class PhaseTrace:
    """The async ``trace`` callback of ONE attempt; fills a :class:`CallTimings`."""

    def __init__(self, call_start: float, timings: CallTimings, dns: DnsCache | None) -> None:
        self.t0 = call_start
        self.timings = timings
        self.dns = dns
        self.new_connection = False

    def ms(self, now: float | None = None) -> float:
        return ((time.perf_counter() if now is None else now) - self.t0) * 1000.0

    async def __call__(self, name: str, info: dict[str, Any]) -> None:
        _, _, event = name.partition(".")  # drop the "connection." / "http11." / "http2." prefix
        if event == "connect_tcp.started":
            self.new_connection = True
            if self.dns is not None and "host" in info:
                host = str(info["host"])
                try:
                    took = await self.dns.resolve_timed(host, int(info.get("port") or 0), info.get("timeout"))
                except TimeoutError as exc:
                    raise httpcore.ConnectTimeout(str(exc)) from None
                except OSError as exc:  # fail fast, with the resolver's reason, as a connect error
                    raise httpcore.ConnectError(f"DNS lookup of {host} failed: {exc}") from None
                if took is not None:
                    self.timings.dns_ms = self.ms()
        elif event == "connect_tcp.complete":
            self.timings.connect_ms = self.ms()
        elif event == "start_tls.complete":
            self.timings.tls_ms = self.ms()
        elif event == "send_request_body.complete":
            self.timings.request_sent_ms = self.ms()
        elif event == "receive_response_headers.complete":
            self.timings.first_byte_ms = self.ms()
