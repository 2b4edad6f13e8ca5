"""Observability of the gateway: Prometheus metrics, the per-minute SLA monitor and its store,
cost accounting, JSON request logs, device health and the operator dashboard.

The app creates one ``Observability`` in its lifespan, hands it every finished request and
upstream attempt, and mounts ``observability_router``. Nothing here imports the app, so the
report CLI can read the same store without starting a server.
"""

from __future__ import annotations

from .core import Observability
from .web import observability_router

__all__ = ["Observability", "observability_router"]
