"""``edgecloud route "text"``: the router's decision for a request, from the command line.

By default it decides in-process with the shipped classifier and the configured policy (no model
loaded, no network); ``--url`` asks a running gateway's ``POST /v1/route`` instead, which also
knows the live state (edge queue, cloud breaker, cache).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("route", help="show where a request would go, and why")
    p.add_argument("text", nargs="+", help="the user message (several: earlier turns, alternating user/assistant)")
    p.add_argument("--system", default=None, help="a system prompt")
    p.add_argument("--model", default="edgecloud-auto")
    p.add_argument("--scenario", default=None, choices=["realtime", "generation", "batch"])
    p.add_argument("--config", type=Path, default=None)
    p.add_argument("--url", default=None, help="ask a running gateway, e.g. http://127.0.0.1:8080")
    p.add_argument("--cloud-available", action=argparse.BooleanOptionalAction, default=True,
                   help="assume the cloud is reachable (in-process mode)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _body(args: argparse.Namespace) -> dict:
    messages = []
    if args.system:
        messages.append({"role": "system", "content": args.system})
    for i, text in enumerate(args.text):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return {"model": args.model, "messages": messages}


def run(args: argparse.Namespace) -> int:
    body = _body(args)
    headers = {"x-edgecloud-scenario": args.scenario} if args.scenario else {}
    if args.url:
        import httpx

        token = os.environ.get("EDGECLOUD_SERVER_ADMIN_TOKEN")
        if token:  # the admin token shows whether the answer is cached (edge/disclosure.py)
            headers["authorization"] = f"Bearer {token}"
        r = httpx.post(args.url.rstrip("/") + "/v1/route", json=body, headers=headers, timeout=10)
        out = r.json()
        if r.status_code >= 400:
            print(json.dumps(out, ensure_ascii=False), file=sys.stderr)
            return 1
    else:
        out = decide_locally(body, headers, args.config, args.cloud_available)
    if args.json:
        print(json.dumps(out, ensure_ascii=False, indent=2))
    else:
        conf = out.get("confidence")
        print(f"route:      {out['route']}")
        print(f"reason:     {out['reason']}")
        if out.get("label"):
            print(f"label:      {out['label']} ({conf:.3f})")
        print(f"scenario:   {out['scenario']}")
        print(f"prompt:     ~{out['prompt_tokens']} tokens")
        print(f"rules:      {' -> '.join(out['rules'])}")
        if out.get("hedge"):
            print(f"hedge:      start the edge after {out['hedge_delay_s']:.2f}s without a cloud token")
        if out.get("error"):
            print(f"error:      {out['error']['message']}")
    return 0


def decide_locally(body: dict, headers: dict, config: Path | None, cloud_available: bool) -> dict:
    import time

    from models.intent.runtime import IntentClassifier

    from .config import load_settings
    from .router import LiveState, Router
    from .schemas import parse_chat_request

    settings = load_settings(config)
    req = parse_chat_request(body, settings, headers)
    router = Router(settings.router, IntentClassifier.load(settings.router.intent_model_dir,
                                                           encoder=settings.router.intent_encoder))
    live = LiveState(edge_ready=True, edge_n_ctx=settings.edge.n_ctx, cloud_enabled=cloud_available,
                     cloud_available=cloud_available)
    # Without the model loaded, estimate tokens the way the gateway does before its model loads.
    prompt_tokens = sum(len(m.content) for m in req.messages) // 3 + 8
    started = time.perf_counter()
    decision = router.decide(req, live, prompt_tokens)
    out = decision.as_dict()
    if decision.refusal is not None:  # what the gateway would answer, as /v1/route shows it
        from .app import refusal_error

        out["error"] = refusal_error(decision.refusal).body()["error"]
    out["decision_ms"] = round((time.perf_counter() - started) * 1000.0, 3)
    return out
