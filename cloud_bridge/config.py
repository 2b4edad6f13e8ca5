"""Provider settings, shared by the gateway's config loader and the bridge itself."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field, SecretStr


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
    providers: list[ProviderConfig] = Field(default_factory=list)
    warmup: bool = True

    @property
    def enabled(self) -> bool:
        return any(p.base_url for p in self.providers)
