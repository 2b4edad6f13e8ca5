"""``edgecloud cache stats|purge|load-faq``: operate a running gateway's answer cache.

The CLI talks to the gateway's admin API instead of opening the cache directory itself: the
running server holds the counters, the semantic index and the FAQ entries in memory, and a
second writer bypassing it would leave those stale. The admin token comes from
``EDGECLOUD_SERVER_ADMIN_TOKEN`` or ``--token-file`` (``-``: standard input) and is sent only as a
bearer header, never printed. It is never taken as a command-line value: every local user can read a
process's arguments (``ps``, ``/proc/PID/cmdline``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8080"
TOKEN_ENV = "EDGECLOUD_SERVER_ADMIN_TOKEN"  # noqa: S105 - the variable name, not a token


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("cache", help="answer cache of a running gateway: stats, purge, load-faq")
    p.add_argument("--url", default=os.environ.get("EDGECLOUD_URL", DEFAULT_URL),
                   help=f"the gateway (default {DEFAULT_URL}, or EDGECLOUD_URL)")
    p.add_argument("--token-file", type=Path, default=None,
                   help=f"file holding the admin token, '-' for standard input (default: ${TOKEN_ENV})")
    # Refused with a clear error rather than unknown: old scripts learn why.
    p.add_argument("--token", default=None, help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the gateway")
    sub = p.add_subparsers(dest="cache_command", metavar="ACTION")
    sub.required = True
    stats = sub.add_parser("stats", help="entries, bytes, hits, misses, hit ratio")
    stats.set_defaults(func=run)
    purge = sub.add_parser("purge", help="remove cached answers (all, or by prefix / knowledge version)")
    purge.add_argument("--prefix", default=None, help="question (normalised) or key prefix")
    purge.add_argument("--knowledge-version", default=None, help="only answers of this knowledge version")
    purge.add_argument("--faq", action="store_true", help="also remove matching FAQ entries")
    purge.set_defaults(func=run)
    load = sub.add_parser("load-faq", help="upload an FAQ pack (JSON or CSV) to the gateway")
    load.add_argument("path", type=Path, help="the pack file on this machine")
    load.add_argument("--name", default=None, help="pack name (default: the file name); replaces a same-named pack")
    load.add_argument("--server-path", action="store_true",
                      help="send the path for the gateway to read instead of uploading the file")
    load.set_defaults(func=run)


def read_token(path: Path) -> str:
    """The token in ``path`` (``-``: standard input), surrounding whitespace removed."""
    text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    return text.strip()


def _request(args: argparse.Namespace) -> tuple[str, str, dict[str, Any]]:
    """(method, path, httpx keyword arguments) for the chosen action."""
    if args.cache_command == "stats":
        return "GET", "/admin/cache/stats", {}
    if args.cache_command == "purge":
        body = {"prefix": args.prefix, "knowledge_version": args.knowledge_version, "faq": args.faq}
        return "POST", "/admin/cache/purge", {"json": body}
    path: Path = args.path
    if args.server_path:
        return "POST", "/admin/cache/faq", {"json": {"path": str(path.resolve())}}
    content = path.read_bytes()
    content_type = "text/csv" if path.suffix.lower() == ".csv" else "application/json"
    params = {"name": args.name or path.name}
    return "POST", "/admin/cache/faq", {"content": content, "headers": {"content-type": content_type},
                                        "params": params}


def run(args: argparse.Namespace) -> int:
    return call_admin(args, _request)


def call_admin(args: argparse.Namespace, build: Callable[[argparse.Namespace], tuple[str, str, dict]]) -> int:
    """Send one admin request built by ``build(args)`` with the admin token from the environment or a file
    (never the command line), print the JSON answer; the exit status says what failed. Shared by every
    command that talks to a running gateway's admin API."""
    import httpx

    if args.token is not None:
        print(f"error: --token would show the admin token to every local user (ps); set {TOKEN_ENV} "
              "or use --token-file", file=sys.stderr)
        return 2
    try:
        token = read_token(args.token_file) if args.token_file else os.environ.get(TOKEN_ENV)
    except OSError as exc:
        print(f"error: cannot read the token file {args.token_file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if not token:
        print(f"error: an admin token is needed ({TOKEN_ENV} or --token-file)", file=sys.stderr)
        return 2
    try:
        method, path, kwargs = build(args)
    except OSError as exc:
        print(f"error: cannot read {args.path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    headers = {"authorization": f"Bearer {token}", **kwargs.pop("headers", {})}
    try:
        with httpx.Client(base_url=args.url, timeout=args.timeout) as client:
            response = client.request(method, path, headers=headers, **kwargs)
    except httpx.HTTPError as exc:
        print(f"error: cannot reach the gateway at {args.url}: {type(exc).__name__}", file=sys.stderr)
        return 1
    try:
        body = response.json()
    except ValueError:
        body = {"error": {"message": response.text[:500]}}
    if response.status_code >= 400:
        message = body.get("error", {}).get("message") if isinstance(body, dict) else None
        print(f"error: HTTP {response.status_code}: {message or body}", file=sys.stderr)
        return 1
    print(json.dumps(body, indent=2, ensure_ascii=False))
    return 0


__all__ = ["call_admin", "register", "run"]
