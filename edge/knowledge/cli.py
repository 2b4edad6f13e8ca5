"""``edgecloud knowledge check|load|status|search``: venue knowledge packs.

``check`` validates a pack on this machine (no gateway needed: what an operator runs before
shipping a pack in a bundle) and can try questions against it. ``load``, ``status`` and ``search``
talk to a running gateway's admin API, which holds the active index; the admin token comes from
``EDGECLOUD_SERVER_ADMIN_TOKEN`` or ``--token-file`` (never a flag: ``ps`` would show it to every
local user) and is sent only as a bearer header.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from edge.cache_cli import DEFAULT_URL, TOKEN_ENV


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("knowledge", help="venue knowledge packs: check, load, status, search")
    p.add_argument("--url", default=os.environ.get("EDGECLOUD_URL", DEFAULT_URL),
                   help=f"the gateway (default {DEFAULT_URL}, or EDGECLOUD_URL)")
    p.add_argument("--token-file", type=Path, default=None,
                   help=f"file holding the admin token, '-' for standard input (default: ${TOKEN_ENV})")
    p.add_argument("--token", default=None, help=argparse.SUPPRESS)  # refused with a clear error
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the gateway")
    sub = p.add_subparsers(dest="knowledge_command", metavar="ACTION")
    sub.required = True
    check = sub.add_parser("check", help="validate a pack file here; optionally try questions against it")
    check.add_argument("path", type=Path)
    check.add_argument("questions", nargs="*", help="questions to retrieve for")
    check.set_defaults(func=run_check)
    load = sub.add_parser("load", help="upload a pack (.md or .json) to the gateway and activate it")
    load.add_argument("path", type=Path)
    load.add_argument("--server-path", action="store_true",
                      help="send the path for the gateway to read instead of uploading the file")
    load.set_defaults(func=run_remote)
    status = sub.add_parser("status", help="the active pack, lookups, hit ratio, most-asked uncovered questions")
    status.set_defaults(func=run_remote)
    search = sub.add_parser("search", help="the passages the gateway retrieves for a question")
    search.add_argument("question")
    search.add_argument("-k", type=int, default=None)
    search.set_defaults(func=run_remote)


def run_check(args: argparse.Namespace) -> int:
    from edge.config import KnowledgeConfig
    from edge.knowledge.service import KnowledgeBase

    base = KnowledgeBase(KnowledgeConfig())
    try:
        active = base.load_path(args.path)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    pack = active.pack
    out: dict[str, Any] = {"name": pack.name, "version": pack.pack_version, "pack_version": pack.version,
                           "facts": len(pack.facts), "languages": pack.languages,
                           "faq_entries": len(pack.faq_entries()), "index_ms": round(active.index.build_ms, 1)}
    if args.questions:
        answers = []
        for question in args.questions:
            evidence = base.evidence(question)
            assert evidence is not None
            answers.append({"question": question, **evidence.as_dict()})
        out["questions"] = answers
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


def _request(args: argparse.Namespace) -> tuple[str, str, dict[str, Any]]:
    if args.knowledge_command == "status":
        return "GET", "/admin/knowledge", {}
    if args.knowledge_command == "search":
        params: dict[str, Any] = {"q": args.question}
        if args.k:
            params["k"] = args.k
        return "GET", "/admin/knowledge/search", {"params": params}
    path: Path = args.path
    if args.server_path:
        return "POST", "/admin/knowledge", {"json": {"path": str(path.resolve())}}
    markdown = path.suffix.lower() in (".md", ".markdown")
    return "POST", "/admin/knowledge", {
        "content": path.read_bytes(), "params": {"name": path.name},
        "headers": {"content-type": "text/markdown; charset=utf-8" if markdown else "application/json"},
    }


def run_remote(args: argparse.Namespace) -> int:
    from ..cache_cli import call_admin

    return call_admin(args, _request)


__all__ = ["register"]
