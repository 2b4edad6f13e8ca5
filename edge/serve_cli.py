"""``edgecloud serve``: run the gateway under uvicorn with deliberate limits."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="run the gateway (OpenAI-compatible API on 127.0.0.1:8080)")
    p.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default 8080)")
    p.add_argument("--config", type=Path, default=None, help="TOML config file (or EDGECLOUD_CONFIG)")
    p.add_argument("--model", type=Path, default=None, help="GGUF model path (default: the embedded model)")
    p.add_argument("--data-dir", type=Path, default=None, help="state directory (cache, SLA, model store)")
    p.add_argument("--print-config", action="store_true", help="print the merged settings (secrets masked)")
    p.set_defaults(func=run)


def configure_logging(level: str, json_logs: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_logs:
        from .logs import JsonFormatter

        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def _warn_missing_semantic(settings: Any) -> None:
    """Semantic matching asked for but its extra absent: one line, then exact matching serves on."""
    from models.extras import missing_extra_message, missing_modules

    cache = settings.cache
    missing = missing_modules("semantic") if cache.enabled and cache.semantic else []
    if missing:
        message = missing_extra_message("semantic", missing, "cache.semantic = true")
        sys.stderr.write(f"warning: {message}; exact matching only\n")


def run(args: argparse.Namespace) -> int:
    from .config import load_settings

    flags = {
        "server.host": args.host,
        "server.port": args.port,
        "server.data_dir": str(args.data_dir) if args.data_dir else None,
        "edge.model_path": str(args.model) if args.model else None,
    }
    settings = load_settings(args.config, flags)
    _warn_missing_semantic(settings)
    if args.print_config:
        print(json.dumps(settings.masked(), indent=2, ensure_ascii=False))
        return 0
    configure_logging(settings.logging.level, settings.logging.json_logs)
    from .secret_masking import install_log_redaction

    install_log_redaction(settings)  # every configured secret, in every log line

    import uvicorn

    from .app import create_app
    from .limits import guarded_protocol

    server = settings.server
    config = uvicorn.Config(
        create_app(settings),
        host=server.host,
        port=server.port,
        loop="auto",
        http=guarded_protocol(server.header_timeout_s),
        ws="none",  # no WebSocket endpoints: skips importing wsproto/websockets at start-up
        log_config=None,
        access_log=False,  # one structured line per request comes from the gateway itself
        limit_concurrency=None,  # requests in flight are limited in the app (edge/limits.py)
        backlog=server.backlog,
        timeout_keep_alive=server.timeout_keep_alive_s,
        h11_max_incomplete_event_size=server.h11_max_incomplete_event_size,
        server_header=False,
    )
    uvicorn.Server(config).run()
    return 0
