"""Client of OpenAI-compatible cloud chat APIs: pooled HTTP/2, retries, breakers, phase timing.

This package imports nothing from ``edge``: the gateway hands it the settings it needs.
"""

from cloud_bridge.client import CallRecord, CloudBridge, ContentDelta, StreamDone
from cloud_bridge.config import CloudConfig, ProviderConfig
from cloud_bridge.errors import CloudError
from cloud_bridge.timings import CallTimings

__all__ = [
    "CallRecord",
    "CallTimings",
    "CloudBridge",
    "CloudConfig",
    "CloudError",
    "ContentDelta",
    "ProviderConfig",
    "StreamDone",
]
