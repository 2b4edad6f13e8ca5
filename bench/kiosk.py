"""``edgecloud bench kiosk``: does the hybrid beat all-cloud and all-edge on realistic kiosk traffic?

One run starts a fake cloud with a latency model (its own process, see ``bench.kiosk_cloud``) and the
real gateway (``edge.cli serve`` in its own process, the embedded on-device model), then replays the
SAME seeded traffic (``bench.kiosk_traffic``) under four strategies, one after the other:

* ``all-cloud``: model ``edgecloud-cloud`` + ``x-edgecloud-cache: bypass``
* ``all-edge``: model ``edgecloud-edge`` + bypass
* ``routed``: model ``edgecloud-auto`` + bypass (router and hedging, no cache)
* ``hybrid``: model ``edgecloud-auto`` with the cache, purged first (``POST /admin/cache/purge``) so
  its hits come only from the traffic's own repeats and the FAQ pack.

This is done per installation shape (``shapes``: 8 kiosks sharing one device, and one kiosk), on the
same questions; then a capacity ladder runs the hybrid alone at more kiosk counts
(``bench.kiosk_capacity``), and the targets are judged per shape (``bench.kiosk_targets``).

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
from bench.kiosk_baseline import format_comparison, load_report
from bench.kiosk_capacity import measure_capacity, orin_nx_estimate
from bench.kiosk_client import STRATEGIES, RequestSettings, Strategy, run_strategy
from bench.kiosk_cloud import CloudProcess, start_cloud_process
from bench.kiosk_gateway import GatewayOptions, GatewayProcess, start_gateway
from bench.kiosk_report import format_report, write_png
from bench.kiosk_stats import Prices, RequestResult, summarize
from bench.kiosk_targets import evaluate_targets
from bench.kiosk_traffic import TrafficConfig, build_traffic, load_pools, traffic_summary

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


@dataclass
class KioskOptions:
    """Everything a run depends on; stored verbatim in the report."""

    quick: bool = False
    # Kiosks sharing one device, one shape each: 8 (a busy hall) and 1 (the common installation).
    shapes: list[int] = field(default_factory=lambda: [8, 1])
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
    dataset_dirs: list[Path] | None = None  # None: the traffic shipped in bench/data/routing
    # One kiosk: the edge idles while the customer thinks, so a short think time only saves wall time.
    single_kiosk_think_s: float = 0.2
    # The one-kiosk shape's strategies (routed is the no-cache diagnostic; the 8-kiosk shape has it).
    single_kiosk_strategies: list[str] = field(default_factory=lambda: ["all-cloud", "all-edge", "hybrid"])
    capacity: bool = True
    capacity_levels: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 12, 16, 24, 32, 48, 64])
    capacity_duration_s: float = 60.0
    capacity_p95_s: float = 1.0  # the edge-routed TTFT P95 a kiosk count must stay under
    baseline: Path | None = None  # an earlier kiosk.json to print each figure beside

    @classmethod
    def quick_defaults(cls, **overrides: Any) -> KioskOptions:
        """The CI smoke run: few requests, cloud delays scaled to 20%, short answers (< 2 minutes)."""
        base: dict[str, Any] = {"quick": True, "shapes": [4, 1], "sessions": 6, "think_mean_s": 0.1,
                                "max_tokens": 16, "time_scale": 0.2, "single_kiosk_think_s": 0.05,
                                "single_kiosk_strategies": ["all-cloud", "hybrid"],
                                "capacity_levels": [1, 4, 6], "capacity_duration_s": 5.0}
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)

    def traffic_config(self, kiosks: int, sessions: int | None = None,
                       duration_s: float | None = None) -> TrafficConfig:
        """The traffic of one shape: ``sessions`` if given, else ``--sessions`` scaled to ``kiosks``
        (it is given for the largest shape), else sized from the duration."""
        if sessions is None and self.sessions:
            sessions = max(kiosks, round(self.sessions * kiosks / max(self.shapes)))
        if sessions is None:
            sessions = self.sized_sessions(kiosks, duration_s or self.duration_s)
        extra = {"dataset_dirs": tuple(self.dataset_dirs)} if self.dataset_dirs else {}
        return TrafficConfig(seed=self.seed, sessions=sessions, concurrency=kiosks, faq_share=self.faq_share,
                             zh_share=self.zh_share, think_mean_s=self.think_mean_s, **extra)

    def sized_sessions(self, kiosks: int, duration_s: float) -> int:
        """Enough sessions that each strategy lasts about ``duration_s`` (1.7 turns/session on average)."""
        per_turn = self.think_mean_s + self.ttft_p50_s * self.time_scale + self.max_tokens / max(
            1.0, self.tokens_per_s) * self.time_scale
        per_kiosk = max(1, round(duration_s / (1.7 * per_turn)))
        return per_kiosk * kiosks

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
        data["dataset_dirs"] = [str(p) for p in self.dataset_dirs] if self.dataset_dirs else None
        data["baseline"] = str(self.baseline) if self.baseline else None
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


@dataclass
class Shape:
    """One installation shape: ``kiosks`` kiosks sharing one device, and the strategies run on it."""

    kiosks: int
    strategies: list[str]
    sessions: list[Any]
    traffic_cfg: TrafficConfig


def plan_shapes(options: KioskOptions) -> list[Shape]:
    """The shapes to run, largest first; every shape replays the same sessions (questions and order).

    The one-kiosk shape takes the largest shape's sessions (sized by ``duration_s``) with think time
    scaled to ``single_kiosk_think_s``: with one kiosk the edge is idle while the customer thinks, so
    think time changes only the wall-clock time, and the same questions keep the shapes comparable.
    The think times are drawn from the same random stream either way, so the questions do not change."""
    kiosks = sorted(set(options.shapes), reverse=True)
    largest = kiosks[0]
    base_cfg = options.traffic_config(largest)
    pools = load_pools(base_cfg)
    shapes = []
    for n in kiosks:
        cfg = options.traffic_config(n, sessions=base_cfg.sessions)
        if n == 1 and largest > 1:
            cfg.think_mean_s = options.single_kiosk_think_s
        strategies = options.strategies
        if n == 1 and largest > 1 and options.single_kiosk_strategies:
            strategies = [s for s in options.strategies if s in options.single_kiosk_strategies]
        shapes.append(Shape(n, strategies, build_traffic(cfg, pools), cfg))
    return shapes


def run_kiosk_benchmark(options: KioskOptions, log: Any = print) -> dict[str, Any]:
    """Run every shape and strategy, then the capacity ladder; write JSON, JSONL and PNG; return the report."""
    started = time.perf_counter()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    machine = machine_facts()
    shapes = plan_shapes(options)
    settings = RequestSettings(max_tokens=options.max_tokens, temperature=options.temperature)
    prices = Prices(options.price_input_per_mtok, options.price_output_per_mtok)
    cap_s = options.strategy_cap_s()
    cloud_latency = {"ttft_p50_s": options.ttft_p50_s * options.time_scale,
                     "ttft_p99_s": options.ttft_p99_s * options.time_scale, "peak": options.peak}

    data_dir = Path(tempfile.mkdtemp(prefix="edgecloud-kiosk-bench-"))
    cloud: CloudProcess | None = None
    gateway: GatewayProcess | None = None
    shape_reports: dict[str, dict[str, Any]] = {}
    all_results: list[tuple[int, RequestResult]] = []
    capacity: dict[str, Any] = {"measured": False}
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
        for shape in shapes:
            summary = traffic_summary(shape.sessions)
            log(f"shape: {shape.kiosks} kiosk(s) on one device; {summary['sessions']} sessions, "
                f"{summary['requests']} requests per strategy; kinds {summary['kinds']}")
            figures: dict[str, dict[str, Any]] = {}
            complete: dict[str, bool] = {}
            hybrid_rows: list[RequestResult] | None = None
            for strategy in [s for s in STRATEGIES if s.name in shape.strategies]:
                # Fewer kiosks play the same sessions one after another: the cap grows (at most 3x).
                shape_cap_s = cap_s * min(3.0, max(1.0, shapes[0].kiosks / shape.kiosks))
                figures[strategy.name], results, complete[strategy.name] = _run_one(
                    strategy, gateway, cloud, shape.sessions, shape.kiosks, settings, prices, shape_cap_s, log)
                all_results += [(shape.kiosks, r) for r in results]
                if strategy.name == "hybrid":
                    hybrid_rows = results
            targets = evaluate_targets(figures, cloud_latency, hybrid_rows)
            if options.quick or options.time_scale != 1.0:
                # Cloud delays are scaled, the edge's are not: the comparison is skewed against the edge.
                targets["note"] = (f"cloud delays scaled by {options.time_scale}: the verdicts only mean "
                                   "something for a full run with time scale 1")
            shape_reports[str(shape.kiosks)] = {
                "kiosks": shape.kiosks, "traffic_config": shape.traffic_cfg.as_dict(), "traffic": summary,
                "strategies": figures, "complete": complete, "targets": targets,
                "hybrid_cache_stats": gateway.cache_stats(),
            }
        if options.capacity:
            measured = {int(k): v["strategies"]["hybrid"] for k, v in shape_reports.items()
                        if "hybrid" in v["strategies"]}
            capacity = measure_capacity(
                options, measured,
                lambda n: _run_capacity_level(n, options, gateway, cloud, settings, prices, cap_s, log,
                                              all_results), log)
    finally:
        if gateway is not None:
            gateway.stop()
        if cloud is not None:
            cloud.stop()
        if not options.keep_data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)

    with contextlib.suppress(OSError):
        machine["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
    headline = shape_reports[str(shapes[0].kiosks)]
    if capacity.get("measured"):
        capacity["orin_nx_7b_estimate"] = orin_nx_estimate(capacity, shape_reports, options)
    report: dict[str, Any] = {
        "benchmark": "kiosk",
        "schema": 2,
        "started_at": started_at,
        "duration_s": round(time.perf_counter() - started, 1),
        "command": command_line(),
        "machine": machine,
        "config": {**options.as_dict(),
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
        "shapes": shape_reports,
        "capacity": capacity,
        # The largest shape, also at the top level: the headline figures, as in schema 1.
        "headline_kiosks": shapes[0].kiosks,
        "traffic": headline["traffic"],
        "strategies": headline["strategies"],
        "complete": headline["complete"],
        "hybrid_cache_stats": headline["hybrid_cache_stats"],
        "targets": headline["targets"],
    }
    out = Path(options.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, rows_path, png_path = out / "kiosk.json", out / "kiosk_requests.jsonl", out / "kiosk.png"
    report["files"] = {"json": str(json_path), "requests": str(rows_path), "png": str(png_path)}
    with open(rows_path, "w", encoding="utf-8") as fh:
        for kiosks, row in all_results:
            fh.write(json.dumps({**row.as_dict(), "kiosks": kiosks}, ensure_ascii=False) + "\n")
    samples = {name: [r.ttft_s for k, r in all_results
                      if k == shapes[0].kiosks and r.strategy == name and r.ok and r.ttft_s is not None]
               for name in headline["strategies"]}
    write_png(report, samples, png_path)
    json_path.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    log(format_report(report))
    if options.baseline is not None:
        log(format_comparison(load_report(options.baseline), report, str(options.baseline)))
    log(f"wrote {json_path}, {rows_path}, {png_path} ({report['duration_s']:.0f} s in all)")
    return report


def _run_capacity_level(
    kiosks: int, options: KioskOptions, gateway: GatewayProcess, cloud: CloudProcess, settings: RequestSettings,
    prices: Prices, cap_s: float, log: Any, sink: list[tuple[int, RequestResult]],
) -> dict[str, Any]:
    """The hybrid alone with ``kiosks`` kiosks, its traffic sized for ``capacity_duration_s``."""
    cfg = options.traffic_config(kiosks, duration_s=options.capacity_duration_s)
    sessions = build_traffic(cfg, load_pools(cfg))
    hybrid = next(s for s in STRATEGIES if s.name == "hybrid")
    figures, results, _ = _run_one(hybrid, gateway, cloud, sessions, kiosks, settings, prices, cap_s, log,
                                   label=f"hybrid@{kiosks}")
    sink += [(kiosks, r) for r in results]
    return figures


def _run_one(
    strategy: Strategy, gateway: GatewayProcess, cloud: CloudProcess, sessions: list[Any], kiosks: int,
    settings: RequestSettings, prices: Prices, cap_s: float, log: Any, label: str | None = None,
) -> tuple[dict[str, Any], list[RequestResult], bool]:
    if strategy.purge_before:
        gateway.purge_cache()
    cloud.reset()
    load_before = _loadavg()
    results, wall, complete = asyncio.run(
        run_strategy(gateway.base_url, strategy, sessions, kiosks, settings, cap_s))
    counters = cloud.counters()
    figures = summarize(results, prices, wall, counters)
    figures["description"] = strategy.description
    figures["complete"] = complete
    figures["kiosks"] = kiosks
    # The machine is shared: the 1-minute load before and after says how much else was running.
    figures["loadavg_1m"] = [load_before, _loadavg()]
    ttft = figures["overall"]["ttft_s"]
    log(f"{label or strategy.name:9s} {figures['requests']} requests in {wall:.1f} s, errors {figures['errors']}, "
        f"routes {figures['routes']}, TTFT p50 {ttft['p50']} p99 {ttft['p99']} s, "
        f"edge p95 {figures['per_route']['edge']['ttft_s']['p95']} s, load {figures['loadavg_1m']}"
        + ("" if complete else " (cut by the time cap)"))
    time.sleep(0.5)  # let cancelled hedge losers leave the edge worker before the next strategy
    return figures, results, complete


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None
