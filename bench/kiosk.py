"""``edgecloud bench kiosk``: does the hybrid beat all-cloud and all-edge on realistic kiosk traffic?

One run starts a fake cloud with a latency model (its own process, see ``bench.kiosk_cloud``) and the
real gateway (``edge.cli serve`` in its own process, the embedded on-device model), then replays the
SAME seeded traffic (``bench.kiosk_traffic``) under four strategies, one after the other:

* ``all-cloud``: model ``edgecloud-cloud`` + ``x-edgecloud-cache: bypass``
* ``all-edge``: model ``edgecloud-edge`` + bypass
* ``routed``: model ``edgecloud-auto`` + bypass (router and hedging, no cache)
* ``hybrid``: model ``edgecloud-auto`` with the cache, purged first (``POST /admin/cache/purge``) so
  its hits come only from the traffic's own repeats and the FAQ pack.

Every answer is streamed; per request the kiosk records TTFT, total time, tokens, route, reason,
label and error (``bench.kiosk_client``). The figures (``bench.kiosk_stats``), the config and the
machine go to ``<out>/kiosk.json``, the per-request rows to ``<out>/kiosk_requests.jsonl`` and the
plots to ``<out>/kiosk.png`` (``bench.kiosk_report``).

Why ``max_tokens`` is small (48): on a 2-core box the 135M edge model decodes ~30-60 tokens/s and
serialises generations; long answers would make the edge queue the bottleneck for reasons a Jetson
Orin NX running a 7B model on its GPU does not share. The edge here is NOT the Jetson's model.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
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
from bench.kiosk_client import STRATEGIES, RequestSettings, Strategy, run_strategy
from bench.kiosk_cloud import CloudProcess, start_cloud_process
from bench.kiosk_gateway import GatewayOptions, GatewayProcess, start_gateway
from bench.kiosk_report import format_table, format_targets, write_png
from bench.kiosk_stats import Prices, RequestResult, evaluate_targets, summarize
from bench.kiosk_traffic import TrafficConfig, build_traffic, load_pools, traffic_summary

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


@dataclass
class KioskOptions:
    """Everything a run depends on; stored verbatim in the report."""

    quick: bool = False
    concurrency: int = 8
    duration_s: float = 75.0  # per strategy, used to size the traffic
    cap_s: float | None = None  # hard cap per strategy; None: max(2.5 x duration, duration + 60)
    sessions: int | None = None  # None: sized from duration_s
    faq_share: float = 0.30
    zh_share: float = 0.35
    think_mean_s: float = 2.0
    seed: int = 7
    max_tokens: int = 48
    temperature: float = 0.2
    strategies: list[str] = field(default_factory=lambda: [s.name for s in STRATEGIES])
    hedge: bool = True
    intent_model_dir: Path | None = None  # None: the classifier shipped in the package
    # Fake cloud latency model (bench.fake_cloud): the defaults.
    ttft_p50_s: float = 1.5
    ttft_p99_s: float = 4.0
    tokens_per_s: float = 50.0
    peak: bool = False
    peak_429_share: float = 0.1
    connection_setup_s: float = 0.0
    time_scale: float = 1.0
    price_input_per_mtok: float = 0.15
    price_output_per_mtok: float = 0.60
    out_dir: Path = DEFAULT_OUT
    keep_data_dir: bool = False

    @classmethod
    def quick_defaults(cls, **overrides: Any) -> KioskOptions:
        """The CI smoke run: few requests, cloud delays scaled to 20%, short answers (< 2 minutes)."""
        base: dict[str, Any] = {"quick": True, "concurrency": 4, "sessions": 6, "think_mean_s": 0.1,
                                "max_tokens": 16, "time_scale": 0.2}
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)

    def traffic_config(self) -> TrafficConfig:
        sessions = self.sessions or self.sized_sessions()
        return TrafficConfig(seed=self.seed, sessions=sessions, concurrency=self.concurrency,
                             faq_share=self.faq_share, zh_share=self.zh_share, think_mean_s=self.think_mean_s)

    def sized_sessions(self) -> int:
        """Enough sessions that each strategy lasts about ``duration_s`` (1.7 turns/session on average)."""
        per_turn = self.think_mean_s + self.ttft_p50_s * self.time_scale + self.max_tokens / max(
            1.0, self.tokens_per_s) * self.time_scale
        per_kiosk = max(1, round(self.duration_s / (1.7 * per_turn)))
        return per_kiosk * self.concurrency

    def cloud_config(self) -> FakeCloudConfig:
        return FakeCloudConfig(
            latency_model=True, ttft_p50_s=self.ttft_p50_s, ttft_p99_s=self.ttft_p99_s,
            tokens_per_s=self.tokens_per_s, peak=self.peak, peak_429_share=self.peak_429_share,
            connection_setup_s=self.connection_setup_s, time_scale=self.time_scale, seed=self.seed,
        )

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["out_dir"] = str(self.out_dir)
        data["intent_model_dir"] = str(self.intent_model_dir) if self.intent_model_dir else None
        return data

    def strategy_cap_s(self) -> float:
        """No strategy may run longer than this: an overloaded all-edge run is cut, and says so."""
        if self.cap_s is not None:
            return self.cap_s
        return 60.0 if self.quick else max(2.5 * self.duration_s, self.duration_s + 60)


def machine_facts() -> dict[str, Any]:
    """What the figures were measured on: they mean little without it."""
    cpu_model = platform.processor() or "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        nproc = os.cpu_count() or 0
    facts: dict[str, Any] = {
        "nproc": nproc, "cpu_count": os.cpu_count(), "cpu_model": cpu_model,
        "platform": platform.platform(), "python": platform.python_version(),
    }
    with contextlib.suppress(Exception):
        import psutil

        facts["ram_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    with contextlib.suppress(OSError):
        facts["loadavg_1m_at_start"] = round(os.getloadavg()[0], 2)
    with contextlib.suppress(Exception):
        from importlib.metadata import version

        facts["llama_cpp_python"] = version("llama-cpp-python")
    facts["source"] = source_revision()
    return facts


def source_revision() -> str:
    """The commit the benchmarked code came from (``EDGECLOUD_BENCH_COMMIT`` for a git-archive copy)."""
    given = os.environ.get("EDGECLOUD_BENCH_COMMIT")
    if given:
        return given
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=str(Path(__file__).resolve().parent),
                             capture_output=True, text=True, timeout=10, check=False)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=str(Path(__file__).resolve().parent), capture_output=True, text=True,
                               timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if out.returncode != 0:
        return "unknown"
    return out.stdout.strip() + (" (working tree has uncommitted changes)" if dirty.stdout.strip() else "")


def command_line() -> str:
    """The command that made this report, as a user would type it."""
    argv = [Path(sys.argv[0]).name, *sys.argv[1:]]
    if argv[0] in ("cli.py", "__main__.py", "-c"):
        argv[0] = "edgecloud"
    return " ".join(argv)


def probe_router(base_url: str, wait_s: float = 15.0) -> dict[str, Any]:
    """Is the intent classifier loaded? A complex prompt through ``POST /v1/route`` says so in its rules."""
    body = {"model": "edgecloud-auto",
            "messages": [{"role": "user", "content": "Prove that the square root of 2 is irrational."}]}
    deadline = time.monotonic() + wait_s
    decision: dict[str, Any] = {}
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            decision = httpx.post(base_url + "/v1/route", json=body, timeout=10).json()
            if not any(r == "no-classifier" for r in decision.get("rules", [])):
                break
        time.sleep(0.5)
    rules = decision.get("rules", [])
    return {"classifier_loaded": bool(rules) and "no-classifier" not in rules, "probe_rules": rules,
            "probe_route": decision.get("route"), "probe_reason": decision.get("reason")}


async def _warm_up(base_url: str) -> None:
    """One edge and one cloud answer before measuring: the first of each pays one-off costs."""
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        for model in ("edgecloud-edge", "edgecloud-cloud"):
            with contextlib.suppress(httpx.HTTPError):
                await client.post("/v1/chat/completions", headers={"x-edgecloud-cache": "bypass"}, json={
                    "model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4})


def run_kiosk_benchmark(options: KioskOptions, log: Any = print) -> dict[str, Any]:
    """Run every strategy; write JSON, JSONL and PNG; return the report dict."""
    started = time.perf_counter()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    machine = machine_facts()
    traffic_cfg = options.traffic_config()
    sessions = build_traffic(traffic_cfg, load_pools(traffic_cfg))
    summary = traffic_summary(sessions)
    log(f"traffic: {summary['sessions']} sessions, {summary['requests']} requests per strategy, "
        f"{options.concurrency} kiosks; kinds {summary['kinds']}")
    strategies = [s for s in STRATEGIES if s.name in options.strategies]
    settings = RequestSettings(max_tokens=options.max_tokens, temperature=options.temperature)
    prices = Prices(options.price_input_per_mtok, options.price_output_per_mtok)
    cap_s = options.strategy_cap_s()

    data_dir = Path(tempfile.mkdtemp(prefix="edgecloud-kiosk-bench-"))
    cloud: CloudProcess | None = None
    gateway: GatewayProcess | None = None
    figures: dict[str, dict[str, Any]] = {}
    all_results: list[RequestResult] = []
    complete: dict[str, bool] = {}
    try:
        cloud = start_cloud_process(options.cloud_config())
        gw_options = GatewayOptions(
            cloud_base_url=cloud.base_url, data_dir=data_dir, hedge=options.hedge,
            intent_model_dir=options.intent_model_dir,
            price_input_per_mtok=options.price_input_per_mtok,
            price_output_per_mtok=options.price_output_per_mtok,
        )
        t_gw = time.perf_counter()
        gateway = start_gateway(gw_options)
        gateway_start_s = time.perf_counter() - t_gw
        router = probe_router(gateway.base_url)
        log(f"gateway ready in {gateway_start_s:.1f} s; classifier loaded: {router['classifier_loaded']}")
        asyncio.run(_warm_up(gateway.base_url))
        for strategy in strategies:
            figures[strategy.name], results, complete[strategy.name] = _run_one(
                strategy, gateway, cloud, sessions, options, settings, prices, cap_s, log)
            all_results += results
        cache_stats = gateway.cache_stats()
    finally:
        if gateway is not None:
            gateway.stop()
        if cloud is not None:
            cloud.stop()
        if not options.keep_data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)

    with contextlib.suppress(OSError):
        machine["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
    report: dict[str, Any] = {
        "benchmark": "kiosk",
        "schema": 1,
        "started_at": started_at,
        "duration_s": round(time.perf_counter() - started, 1),
        "command": command_line(),
        "machine": machine,
        "config": {**options.as_dict(), "traffic": traffic_cfg.as_dict(),
                   "cloud": asdict(options.cloud_config()),
                   "gateway": {"hedge": gw_options.hedge, "edge_max_queue": gw_options.edge_max_queue,
                               "intent_model_dir": str(gw_options.intent_model_dir or "shipped"),
                               "cloud_max_connections": gw_options.cloud_max_connections,
                               "faq_paths": [str(p) for p in gw_options.faq_paths]},
                   "request": asdict(settings),
                   "fake_cloud_process": "subprocess (python -m bench.kiosk_cloud)",
                   "gateway_process": "subprocess (python -m edge.cli serve)"},
        "gateway_start_s": round(gateway_start_s, 2),
        "router": router,
        "traffic": summary,
        "strategies": figures,
        "complete": complete,
        "hybrid_cache_stats": cache_stats,
        "targets": evaluate_targets(figures, {"ttft_p50_s": options.ttft_p50_s * options.time_scale,
                                              "ttft_p99_s": options.ttft_p99_s * options.time_scale,
                                              "peak": options.peak}),
    }
    if options.quick or options.time_scale != 1.0:
        # Cloud delays are scaled, the edge's are not: the comparison is skewed against the edge.
        report["targets"]["note"] = (f"cloud delays scaled by {options.time_scale}: the verdicts only mean "
                                     "something for a full run with time scale 1")
    out = Path(options.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, rows_path, png_path = out / "kiosk.json", out / "kiosk_requests.jsonl", out / "kiosk.png"
    report["files"] = {"json": str(json_path), "requests": str(rows_path), "png": str(png_path)}
    with open(rows_path, "w", encoding="utf-8") as fh:
        for row in all_results:
            fh.write(json.dumps(row.as_dict(), ensure_ascii=False) + "\n")
    samples = {name: [r.ttft_s for r in all_results if r.strategy == name and r.ok and r.ttft_s is not None]
               for name in figures}
    write_png(report, samples, png_path)
    json_path.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    log(format_table(report))
    log(format_targets(report))
    log(f"wrote {json_path}, {rows_path}, {png_path} ({report['duration_s']:.0f} s in all)")
    return report


def _run_one(
    strategy: Strategy, gateway: GatewayProcess, cloud: CloudProcess, sessions: list[Any],
    options: KioskOptions, settings: RequestSettings, prices: Prices, cap_s: float, log: Any,
) -> tuple[dict[str, Any], list[RequestResult], bool]:
    if strategy.purge_before:
        gateway.purge_cache()
    cloud.reset()
    results, wall, complete = asyncio.run(
        run_strategy(gateway.base_url, strategy, sessions, options.concurrency, settings, cap_s))
    counters = cloud.counters()
    figures = summarize(results, prices, wall, counters)
    figures["description"] = strategy.description
    figures["complete"] = complete
    ttft = figures["overall"]["ttft_s"]
    log(f"{strategy.name:9s} {figures['requests']} requests in {wall:.1f} s, errors {figures['errors']}, "
        f"routes {figures['routes']}, TTFT p50 {ttft['p50']} p99 {ttft['p99']} s"
        + ("" if complete else " (cut by the time cap)"))
    time.sleep(0.5)  # let cancelled hedge losers leave the edge worker before the next strategy
    return figures, results, complete
