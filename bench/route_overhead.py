"""The router's decision time: everything the gateway does before it calls a backend.

Per request: validate the body (``parse_chat_request``), the cache policy and a lookup (a miss),
count the prompt's tokens with the model's tokenizer, run the ONNX intent classifier and the
policy. Over a few thousand requests drawn from ``../shared/datasets/routing`` (English and
Chinese) when present, else from built-in kiosk questions. Prints P50/P99 and writes
``bench/results/route_overhead.json``.

    .venv/bin/python -m bench.route_overhead [--requests 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from bench.edge_overhead import QUESTIONS, percentile

RESULTS = Path(__file__).resolve().parent / "results"
SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "datasets" / "routing"


def load_texts(limit: int, seed: int = 7) -> list[str]:
    texts: list[str] = []
    if SHARED.is_dir():
        for path in sorted(SHARED.glob("*.jsonl")):
            with path.open(encoding="utf-8") as fh:  # not splitlines(): texts may hold U+2028
                rows = [json.loads(line) for line in fh if line.strip()]
            for row in rows:
                if "messages" not in row and len(row["text"]) < 2000:
                    texts.append(row["text"])
    texts = texts or list(QUESTIONS)
    rng = random.Random(seed)
    return [rng.choice(texts) for _ in range(limit)]


async def measure(n: int) -> dict:
    from edge.config import Settings
    from edge.services import Services

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.model_validate({"server": {"data_dir": tmp}, "metrics": {"enabled": False}})
        services = Services(settings)
        await services.start()
        await services.loaded.wait()
        from edge.schemas import parse_chat_request

        pipeline, cache = services.pipeline, services.cache
        texts = load_texts(n)
        stages: dict[str, list[float]] = {"parse": [], "cache": [], "decide": [], "total": []}
        routes: dict[str, int] = {}
        for i, text in enumerate(texts):
            body = {"model": "edgecloud-auto", "messages": [
                {"role": "system", "content": "You are a mall kiosk."}, {"role": "user", "content": f"{text} #{i}"}]}
            t0 = time.perf_counter()
            req = parse_chat_request(body, settings, {})
            t1 = time.perf_counter()
            if cache is not None:
                policy = cache.policy(req)
                if policy.read:
                    cache.lookup(req, policy)
            t2 = time.perf_counter()
            decision = pipeline.decide(req)
            t3 = time.perf_counter()
            for name, value in (("parse", t1 - t0), ("cache", t2 - t1), ("decide", t3 - t2), ("total", t3 - t0)):
                stages[name].append(value * 1000.0)
            routes[decision.route] = routes.get(decision.route, 0) + 1
        await services.aclose()
    out = {name: {"p50_ms": percentile(v, 0.5), "p99_ms": percentile(v, 0.99), "max_ms": max(v)}
           for name, v in stages.items()}
    return {"requests": n, "stages": out, "routes": routes,
            "classifier": type(services.classifier).__name__ if services.classifier else None,
            "data": "shared/datasets/routing" if SHARED.is_dir() else "built-in kiosk questions"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=RESULTS / "route_overhead.json")
    args = parser.parse_args(argv)
    report = asyncio.run(measure(args.requests))
    report["machine"] = {"cpus": os.cpu_count()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"{report['requests']} requests ({report['data']}), routes {report['routes']}")
    for name, s in report["stages"].items():
        print(f"  {name:8} p50 {s['p50_ms']:.3f} ms   p99 {s['p99_ms']:.3f} ms   max {s['max_ms']:.3f} ms")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
