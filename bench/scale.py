"""``edgecloud bench scale``: sustained load on cache hits and on ``/v1/route`` with N uvicorn workers.

The question: how many requests per second can one kiosk box answer from the cache, or route, while
the P99 latency stays under a stated bound (default 50 ms), and does adding uvicorn workers (which
share the answer cache's on-disk SQLite store) raise that number?

Method: the gateway runs as ``uvicorn --workers N --factory bench.scale_app:create`` (a subprocess;
every worker loads the model and the classifier, and loads the FAQ pack into the shared cache). A
closed-loop asyncio load generator keeps C requests in flight for D seconds per level (after a one
second warm-up) and records every latency. Cache load: non-streamed FAQ questions (every answer must
come back with ``x-edgecloud-route: cache``, others count as misses). Route load: ``POST /v1/route``
with simple and complex questions from the routing dataset. "Sustained" for a worker count = the
highest throughput of a level whose P99 met the bound.

Caveat stated in the report: the load generator runs on the same machine and shares its cores with
the workers, so on a 2-core box the figures are a floor, not the gateway's ceiling.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

from bench.fake_cloud import FakeCloudConfig
from bench.kiosk import DEFAULT_OUT, command_line, machine_facts
from bench.kiosk_cloud import start_cloud_process
from bench.kiosk_gateway import DEFAULT_FAQ, GatewayOptions
from bench.kiosk_traffic import TrafficConfig, load_pools
from bench.local_run import free_port, render_toml
from bench.percentile import percentiles

TARGETS = ("cache", "route")


@dataclass
class ScaleOptions:
    workers: list[int] = field(default_factory=lambda: [1, 2])
    concurrency: list[int] = field(default_factory=lambda: [1, 4, 16, 64])
    duration_s: float = 8.0
    warmup_s: float = 1.0
    p99_bound_ms: float = 50.0
    targets: list[str] = field(default_factory=lambda: list(TARGETS))
    quick: bool = False
    out_dir: Path = DEFAULT_OUT

    @classmethod
    def from_args(cls, args: Any) -> ScaleOptions:
        if args.quick:
            return cls(workers=[1], concurrency=[2, 8], duration_s=3.0, warmup_s=0.5,
                       p99_bound_ms=args.p99_bound_ms, targets=_csv(args.targets), quick=True,
                       out_dir=args.out or DEFAULT_OUT)
        return cls(workers=[int(w) for w in _csv(args.workers)],
                   concurrency=[int(c) for c in _csv(args.concurrency)], duration_s=args.duration,
                   p99_bound_ms=args.p99_bound_ms, targets=_csv(args.targets),
                   out_dir=args.out or DEFAULT_OUT)


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


@dataclass
class Workload:
    """Request bodies a load level cycles through."""

    path: str
    bodies: list[dict[str, Any]]
    expect_route: str | None  # the x-edgecloud-route every answer must carry (None: no check)


def workloads() -> dict[str, Workload]:
    config = TrafficConfig()
    pools = load_pools(config)
    faq = [q for qs in pools.faq.values() for q in qs]
    cache = [{"model": "edgecloud-auto", "messages": [{"role": "user", "content": q}], "max_tokens": 48,
              "temperature": 0.2} for q in faq]
    texts: list[str] = []
    for pool in (pools.simple, pools.complex):
        for lang in sorted(pool):
            texts += [row["text"] for row in pool[lang][:100]]
    route = [{"model": "edgecloud-auto", "messages": [{"role": "user", "content": t}]} for t in texts]
    return {"cache": Workload("/v1/chat/completions", cache, "cache"),
            "route": Workload("/v1/route", route, None)}


async def _load_level(base_url: str, work: Workload, concurrency: int, duration_s: float,
                      warmup_s: float) -> dict[str, Any]:
    """C closed-loop workers for warm-up + duration seconds; only the measured window is recorded.

    Each worker has its own single-connection client: one shared httpx pool serialises on its own
    bookkeeping under many concurrent requests (encode/httpx#3215) and would measure the load
    generator instead of the gateway.
    """
    latencies: list[float] = []
    errors: dict[str, int] = {}
    misses = 0
    counter = 0
    start = time.perf_counter()
    measure_from = start + warmup_s
    stop_at = measure_from + duration_s

    async def worker() -> None:
        nonlocal counter, misses
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30) as client:
            while True:
                now = time.perf_counter()
                if now >= stop_at:
                    return
                body = work.bodies[counter % len(work.bodies)]
                counter += 1
                try:
                    resp = await client.post(work.path, json=body)
                    elapsed = time.perf_counter() - now
                    if now < measure_from:
                        continue
                    if resp.status_code != 200:
                        errors[str(resp.status_code)] = errors.get(str(resp.status_code), 0) + 1
                        continue
                    if work.expect_route and resp.headers.get("x-edgecloud-route") != work.expect_route:
                        misses += 1
                    latencies.append(elapsed)
                except httpx.HTTPError as exc:
                    if now >= measure_from:
                        errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    ms = [v * 1000 for v in latencies]
    return {"concurrency": concurrency, "requests": len(latencies), "errors": errors, "misses": misses,
            "requests_per_s": round(len(latencies) / duration_s, 1), "latency_ms": percentiles(ms)}


def _start_workers(n: int, config_path: Path, log_path: Path, timeout_s: float = 240.0) -> tuple[Any, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGECLOUD_")}
    env["EDGECLOUD_CONFIG"] = str(config_path)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "bench.scale_app:create", "--factory", "--workers", str(n),
             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log",
             "--no-server-header"],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(Path(__file__).resolve().parent.parent),
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    ready_in_a_row = 0
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"uvicorn exited with {proc.returncode}; see {log_path}")
        try:
            # Connections land on any worker: many 200s in a row mean every worker has its model.
            ok = httpx.get(base + "/readyz", timeout=2, headers={"connection": "close"}).status_code == 200
            ready_in_a_row = ready_in_a_row + 1 if ok else 0
            if ready_in_a_row >= 10 * n:
                return proc, base
        except httpx.HTTPError:
            ready_in_a_row = 0
        time.sleep(0.1 if ready_in_a_row else 0.3)
    _stop(proc)
    raise RuntimeError(f"{n} workers not ready within {timeout_s:.0f} s; see {log_path}")


def _stop(proc: Any) -> None:
    if proc.poll() is None:
        proc.terminate()  # uvicorn's supervisor stops its workers on SIGTERM
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def run_scale_benchmark(options: ScaleOptions, log: Any = print) -> dict[str, Any]:
    started = time.perf_counter()
    machine = machine_facts()
    loads = workloads()
    data_dir = Path(tempfile.mkdtemp(prefix="edgecloud-scale-bench-"))
    cloud = start_cloud_process(FakeCloudConfig())
    results: dict[str, Any] = {}
    try:
        gw = GatewayOptions(cloud_base_url=cloud.base_url, data_dir=data_dir, faq_paths=[DEFAULT_FAQ])
        tree = gw.tree(admin_token=os.urandom(16).hex())
        tree["edge"]["warmup"] = False
        tree["metrics"] = {"enabled": True}
        config_path = data_dir / "gateway.toml"
        config_path.write_text(render_toml(tree), encoding="utf-8")
        os.chmod(config_path, 0o600)
        for n in options.workers:
            t0 = time.perf_counter()
            proc, base = _start_workers(n, config_path, data_dir / "uvicorn.log")
            log(f"{n} worker(s) ready in {time.perf_counter() - t0:.1f} s")
            try:
                per_target: dict[str, Any] = {}
                for target in options.targets:
                    levels = []
                    for c in options.concurrency:
                        level = asyncio.run(
                            _load_level(base, loads[target], c, options.duration_s, options.warmup_s))
                        level["meets_bound"] = (level["latency_ms"]["p99"] is not None and not level["errors"]
                                                and not level["misses"]
                                                and level["latency_ms"]["p99"] <= options.p99_bound_ms)
                        levels.append(level)
                        lat = level["latency_ms"]
                        log(f"  workers={n} {target:5s} c={c:3d}: {level['requests_per_s']:8.1f} req/s  "
                            f"p50 {lat['p50']} ms  p99 {lat['p99']} ms  errors {level['errors'] or 0}  "
                            f"misses {level['misses']}")
                    good = [lv["requests_per_s"] for lv in levels if lv["meets_bound"]]
                    per_target[target] = {"levels": levels,
                                          "sustained_requests_per_s": max(good) if good else None}
                results[str(n)] = per_target
            finally:
                _stop(proc)
    finally:
        cloud.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    with contextlib.suppress(OSError):
        machine["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
    report = {
        "benchmark": "scale", "schema": 1,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "duration_s": round(time.perf_counter() - started, 1),
        "command": command_line(),
        "machine": machine,
        "config": {**asdict(options), "out_dir": str(options.out_dir),
                   "server": "uvicorn --workers N --factory bench.scale_app:create (one shared cache dir)",
                   "load_generator": "closed loop, asyncio + httpx, same machine"},
        "p99_bound_ms": options.p99_bound_ms,
        "workers": results,
    }
    out = Path(options.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "scale.json"
    report["files"] = {"json": str(path)}
    path.write_text(json.dumps(report, indent=2), encoding="utf-8")
    for n, per_target in results.items():
        for target, figures in per_target.items():
            log(f"workers={n} {target}: sustained {figures['sustained_requests_per_s']} req/s "
                f"with P99 <= {options.p99_bound_ms:.0f} ms")
    log(f"wrote {path} ({report['duration_s']:.0f} s in all)")
    return report
