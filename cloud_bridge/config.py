"""Provider settings, shared by the gateway's config loader and the bridge itself."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, SecretStr

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (JetPack 6)
    import tomli as tomllib

ENV_BASE_URL = "EDGECLOUD_CLOUD_BASE_URL"
ENV_API_KEY = "EDGECLOUD_CLOUD_API_KEY"
ENV_MODEL = "EDGECLOUD_CLOUD_MODEL"


class ProviderConfig(BaseModel):
    """One OpenAI-compatible upstream, in priority order within ``CloudConfig.providers``.

    The API key comes from the environment (``api_key_env``), a file (``api_key_file``) or the
    config itself (``api_key``), never from a kiosk's request.
    """

    name: str = "default"
    base_url: str = ""
    api_key: SecretStr | None = None
    api_key_env: str | None = None
    api_key_file: Path | None = None
    model: str = "gpt-4o-mini"
    # Maps the gateway's model names (or a kiosk's hard-coded vendor names) to this provider's.
    model_map: dict[str, str] = Field(default_factory=dict)
    http2: bool = True
    verify_tls: bool | str = True
    connect_timeout_s: float = 3.0
    ttft_timeout_s: float = 8.0
    max_gap_s: float = 10.0
    total_timeout_s: float = 60.0
    max_retries: int = 2
    retry_budget_ratio: float = 0.2
    backoff_base_s: float = 0.2
    backoff_max_s: float = 4.0
    max_connections: int = 32
    keepalive_expiry_s: float = 120.0
    keep_warm_interval_s: float = 30.0
    breaker_consecutive_failures: int = 5
    breaker_error_rate: float = 0.5
    breaker_window_s: float = 30.0
    breaker_min_calls: int = 10
    breaker_open_s: float = 15.0
    # Prices in USD per million tokens, for the cost report.
    price_input_per_mtok: float = 0.15
    price_output_per_mtok: float = 0.60
    max_response_bytes: int = 8 * 1024 * 1024
    # False: ask the upstream for a plain JSON answer (for APIs whose streaming is broken);
    # the bridge then yields the whole text as one delta and cannot time the first token.
    stream: bool = True
    # Ask for the final usage chunk (``stream_options.include_usage``); off for old servers that reject it.
    stream_usage: bool = True
    retry_statuses: list[int] = Field(default_factory=lambda: [429, 500, 502, 503, 504])
    # Extra headers some gateways need (e.g. an organisation id). Never put the key here: use
    # api_key_header. Their values are masked in --print-config and redacted from logs all the same.
    extra_headers: dict[str, str] = Field(default_factory=dict)
    # The header that carries the key: "authorization" sends "Bearer <key>"; any other name sends the
    # key as it is (Azure OpenAI: "api-key"; Anthropic-style gateways: "x-api-key").
    api_key_header: str = Field(default="authorization", pattern=r"^[A-Za-z0-9-]{1,64}$")

    def auth_headers(self) -> dict[str, str]:
        """The header carrying the key, or nothing when no key is configured."""
        key = self.resolved_api_key()
        if not key:
            return {}
        name = self.api_key_header.lower()
        return {name: f"Bearer {key}" if name == "authorization" else key}

    def resolved_api_key(self) -> str | None:
        """The key to send, looked up at call time so a rotated key file takes effect."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        if self.api_key_env:
            value = os.environ.get(self.api_key_env)
            if value:
                return value
        if self.api_key_file:
            try:
                return self.api_key_file.read_text(encoding="utf-8").strip() or None
            except OSError:
                return None
        return None


class CloudConfig(BaseModel):
    """Every upstream the bridge may use, first = preferred; later ones take over when it fails."""

    providers: list[ProviderConfig] = Field(default_factory=list)
    warmup: bool = True
    keep_warm: bool = True
    # How many recent successful calls feed the live TTFT quantile the router hedges on.
    ttft_window: int = 200
    # Our own resolver cache (see cloud_bridge/timings.py): DNS is timed once per TTL per host.
    dns_cache_ttl_s: float = 60.0

    @property
    def enabled(self) -> bool:
        return any(p.base_url for p in self.providers)

    @classmethod
    def from_env_and_toml(
        cls, path: Path | str | None = None, environ: Mapping[str, str] | None = None
    ) -> CloudConfig:
        """Build the config the way the gateway does, without importing ``edge``.

        ``path`` (or ``EDGECLOUD_CONFIG``) is a TOML file whose ``[cloud]`` section (with
        ``[[cloud.providers]]`` tables) is read; ``EDGECLOUD_CLOUD_BASE_URL`` / ``_API_KEY`` /
        ``_MODEL`` then define a provider named ``default`` that goes first, replacing a file
        provider of the same name. This lets ``edgecloud diagnose cloud`` run on a kiosk with
        only the three environment variables set.
        """
        env = os.environ if environ is None else environ
        section: dict[str, Any] = {}
        chosen = path or env.get("EDGECLOUD_CONFIG")
        if chosen:
            with open(chosen, "rb") as fh:
                section = dict(tomllib.load(fh).get("cloud", {}))
        providers: list[dict[str, Any]] = list(section.get("providers", []))
        base_url = env.get(ENV_BASE_URL)
        if base_url:
            single: dict[str, Any] = {"name": "default", "base_url": base_url}
            if env.get(ENV_API_KEY):
                single["api_key"] = env[ENV_API_KEY]
            if env.get(ENV_MODEL):
                single["model"] = env[ENV_MODEL]
            providers = [single, *[p for p in providers if p.get("name") != "default"]]
        section["providers"] = providers
        return cls.model_validate(section)
