"""The bridge's connections: one pooled HTTP/2 client per provider, opened warm and kept warm.

An escalated kiosk request should not pay a fresh TCP+TLS handshake, so each provider's
``httpx.AsyncClient`` lives as long as the bridge, one connection is opened at start-up
(``probe``: ``GET /models``, whose answer, even a 401, leaves a pooled connection behind), and
``keep_warm`` probes a provider again when it has been idle for its ``keep_warm_interval_s``.
``Provider`` also carries the provider's breaker and retry budget, which ``CloudBridge`` uses.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import httpx

from cloud_bridge.breaker import CircuitBreaker
from cloud_bridge.config import ProviderConfig
from cloud_bridge.retry import RetryBudget

log = logging.getLogger("cloud_bridge")


@dataclass
class Provider:
    """Runtime state of one configured upstream (lives as long as the bridge)."""

    cfg: ProviderConfig
    breaker: CircuitBreaker
    budget: RetryBudget
    client: httpx.AsyncClient | None = None
    chat_url: httpx.URL | None = None
    models_url: httpx.URL | None = None
    last_used: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return self.cfg.name


def endpoint(base_url: str, suffix: str) -> httpx.URL:
    """``{base}/suffix`` keeping any query string of the base (some gateways need one)."""
    url = httpx.URL(base_url)
    return url.copy_with(path=url.path.rstrip("/") + "/" + suffix)


def _verify(value: bool | str) -> bool | ssl.SSLContext:
    """A CA bundle path becomes an SSLContext (httpx 0.28 deprecates ``verify=<path>``)."""
    if isinstance(value, str):
        return ssl.create_default_context(cafile=value)
    return value


def open_client(prov: Provider) -> None:
    """The provider's pooled client and its endpoints (no connection is opened yet)."""
    cfg = prov.cfg
    prov.chat_url = endpoint(cfg.base_url, "chat/completions")
    prov.models_url = endpoint(cfg.base_url, "models")
    prov.client = httpx.AsyncClient(
        http2=cfg.http2,
        verify=_verify(cfg.verify_tls),
        limits=httpx.Limits(
            max_connections=cfg.max_connections,
            max_keepalive_connections=cfg.max_connections,
            keepalive_expiry=cfg.keepalive_expiry_s,
        ),
        timeout=httpx.Timeout(
            connect=cfg.connect_timeout_s, read=None, write=cfg.connect_timeout_s,
            pool=cfg.connect_timeout_s,
        ),
        follow_redirects=False,
    )


async def probe(prov: Provider, redact: Callable[[str], str]) -> None:
    """GET /models: any answer (even 401/404) leaves a warm, pooled connection behind."""
    if prov.client is None or prov.models_url is None:
        return
    headers = {"x-request-id": "edgecloud-keep-warm", **prov.cfg.auth_headers()}
    timeout = prov.cfg.connect_timeout_s
    try:
        with anyio.fail_after(timeout * 2):
            async with prov.client.stream("GET", prov.models_url, headers=headers) as response:
                async for _ in response.aiter_raw():
                    pass
    except Exception as exc:
        reason = redact(f"{type(exc).__name__}: {exc}")
        log.info("keep-warm probe of %s failed: %s", prov.name, reason)
    prov.last_used = time.monotonic()


async def keep_warm(providers: list[Provider], redact: Callable[[str], str]) -> None:
    """Probe each provider idle for its ``keep_warm_interval_s``; runs until cancelled."""
    interval = min(p.cfg.keep_warm_interval_s for p in providers)
    while True:
        await asyncio.sleep(max(0.05, interval / 2))
        now = time.monotonic()
        for prov in providers:
            if now - prov.last_used >= prov.cfg.keep_warm_interval_s:
                await probe(prov, redact)
