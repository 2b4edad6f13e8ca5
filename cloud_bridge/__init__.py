"""Client of OpenAI-compatible cloud chat APIs: pooled HTTP/2, retries, breakers, phase timing.

This package imports nothing from ``edge``: the gateway hands it the settings it needs.
Names are imported lazily (PEP 562) so that reading the provider settings
(``cloud_bridge.config``) does not pull in httpx: the gateway's start-up stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "CallRecord": "cloud_bridge.client",
    "CloudBridge": "cloud_bridge.client",
    "ContentDelta": "cloud_bridge.client",
    "StreamDone": "cloud_bridge.client",
    "ToolCallDelta": "cloud_bridge.events",
    "CloudConfig": "cloud_bridge.config",
    "ProviderConfig": "cloud_bridge.config",
    "CloudError": "cloud_bridge.errors",
    "CallTimings": "cloud_bridge.timings",
}

if TYPE_CHECKING:  # pragma: no cover
    from cloud_bridge.client import CallRecord, CloudBridge, ContentDelta, StreamDone
    from cloud_bridge.config import CloudConfig, ProviderConfig
    from cloud_bridge.errors import CloudError
    from cloud_bridge.events import ToolCallDelta
    from cloud_bridge.timings import CallTimings


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cloud_bridge' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "CallRecord",
    "CallTimings",
    "CloudBridge",
    "CloudConfig",
    "CloudError",
    "ContentDelta",
    "ProviderConfig",
    "StreamDone",
    "ToolCallDelta",
]
