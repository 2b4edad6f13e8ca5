"""An import string for ``uvicorn --workers N --factory bench.scale_app:create``.

uvicorn's multi-worker mode re-imports the app in every worker process, so it needs a factory it
can import, not the app object ``edgecloud serve`` builds. The settings come from the environment
(``EDGECLOUD_CONFIG`` and ``EDGECLOUD_*``) exactly as ``edgecloud serve`` reads them; each worker
builds its own ``Services`` in its own lifespan, and the workers share only what lives on disk: the
answer cache's diskcache/SQLite directory. Kept in ``bench/`` because only the scale test runs the
gateway this way.
"""

from __future__ import annotations

from fastapi import FastAPI


def create() -> FastAPI:
    from edge.app import create_app
    from edge.config import load_settings
    from edge.serve_cli import configure_logging

    settings = load_settings()
    configure_logging(settings.logging.level, settings.logging.json_logs)
    return create_app(settings)
