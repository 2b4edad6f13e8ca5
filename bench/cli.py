"""``edgecloud bench``: the kiosk benchmark and the scale test.

Registered lazily by ``edge/cli.py``; the heavy imports (numpy, matplotlib, the gateway) happen only
when a benchmark actually runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser(
        "bench", help="benchmarks: kiosk (end to end), scale (sustained load), knowledge (venue facts)")
    sub = bench.add_subparsers(dest="bench_command", metavar="BENCH")
    sub.required = True

    k = sub.add_parser("kiosk", help="all-cloud vs all-edge vs routed vs hybrid on the same kiosk traffic")
    k.add_argument("--quick", action="store_true", help="CI smoke run: under 2 minutes, cloud delays x0.2")
    k.add_argument("--concurrency", type=int, default=None, help="simulated kiosks at once, 1-64 (default 8)")
    k.add_argument("--duration", type=float, default=None,
                   help="seconds per strategy the traffic is sized for (default 75)")
    k.add_argument("--cap", type=float, default=None,
                   help="hard time cap per strategy, s (default max(2.5 x duration, duration + 60))")
    k.add_argument("--sessions", type=int, default=None, help="number of sessions (overrides --duration)")
    k.add_argument("--faq-share", type=float, default=None, help="share of FAQ repeats (default 0.3)")
    k.add_argument("--zh-share", type=float, default=None, help="share of Chinese questions (default 0.35)")
    k.add_argument("--think-time", type=float, default=None,
                   help="mean think time between turns, s (default 2)")
    k.add_argument("--max-tokens", type=int, default=None, help="max_tokens per answer (default 48)")
    k.add_argument("--seed", type=int, default=None, help="traffic and latency seed (default 7)")
    k.add_argument("--strategies", default=None,
                   help="comma-separated subset of all-cloud,all-edge,routed,hybrid (default all)")
    k.add_argument("--no-hedge", action="store_true", help="turn the router's hedging off")
    k.add_argument("--intent-model-dir", type=Path, default=None,
                   help="intent classifier folder (intent.onnx + card.json); default: the shipped one")
    k.add_argument("--ttft-p50", type=float, default=None, help="fake cloud TTFT median, s (default 1.5)")
    k.add_argument("--ttft-p99", type=float, default=None, help="fake cloud TTFT P99, s (default 4)")
    k.add_argument("--tokens-per-s", type=float, default=None, help="fake cloud decode rate (default 50)")
    k.add_argument("--peak", action="store_true", help="peak hour: heavier TTFT tail and a share of 429s")
    k.add_argument("--peak-429-share", type=float, default=None, help="share of 429s at peak (default 0.1)")
    k.add_argument("--connection-setup", type=float, default=None,
                   help="fake network delay per new cloud connection, s (default 0)")
    k.add_argument("--time-scale", type=float, default=None, help="scale every fake cloud delay (default 1)")
    k.add_argument("--out", type=Path, default=None, help="output folder (default bench/results)")
    k.add_argument("--keep-data-dir", action="store_true", help="keep the gateway's temp data dir (logs)")
    k.set_defaults(func=run_kiosk, needs_extra="bench")

    s = sub.add_parser("scale", help="sustained load on cache hits and /v1/route, several uvicorn workers")
    s.add_argument("--workers", default="1,2", help="comma-separated worker counts (default 1,2)")
    s.add_argument("--concurrency", default="1,4,16,64", help="comma-separated client concurrency levels")
    s.add_argument("--duration", type=float, default=8.0, help="seconds per load level (default 8)")
    s.add_argument("--p99-bound-ms", type=float, default=50.0, help="the P99 latency bound, ms (default 50)")
    s.add_argument("--targets", default="cache,route", help="comma-separated: cache, route")
    s.add_argument("--quick", action="store_true", help="one worker count, two levels, 3 s each")
    s.add_argument("--out", type=Path, default=None, help="output folder (default bench/results)")
    s.set_defaults(func=run_scale, needs_extra="bench")

    from bench.knowledge import register_parser as register_knowledge

    register_knowledge(sub)


def _exit_on_sigterm() -> None:
    """SIGTERM -> SystemExit, so the benchmark's ``finally`` stops the gateway and fake cloud it started."""
    import signal

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def run_kiosk(args: argparse.Namespace) -> int:
    from bench.kiosk import KioskOptions, run_kiosk_benchmark

    _exit_on_sigterm()

    overrides = {
        "concurrency": args.concurrency, "duration_s": args.duration, "cap_s": args.cap,
        "intent_model_dir": args.intent_model_dir, "sessions": args.sessions,
        "faq_share": args.faq_share, "zh_share": args.zh_share, "think_mean_s": args.think_time,
        "max_tokens": args.max_tokens, "seed": args.seed, "ttft_p50_s": args.ttft_p50,
        "ttft_p99_s": args.ttft_p99, "tokens_per_s": args.tokens_per_s, "peak_429_share": args.peak_429_share,
        "connection_setup_s": args.connection_setup, "time_scale": args.time_scale, "out_dir": args.out,
        "strategies": [s.strip() for s in args.strategies.split(",")] if args.strategies else None,
    }
    if args.concurrency is not None and not 1 <= args.concurrency <= 64:
        raise SystemExit("--concurrency must be between 1 and 64")
    flags = {"peak": args.peak or None, "hedge": False if args.no_hedge else None,
             "keep_data_dir": args.keep_data_dir or None}
    overrides.update(flags)
    if args.quick:
        options = KioskOptions.quick_defaults(**overrides)
    else:
        options = KioskOptions(**{k: v for k, v in overrides.items() if v is not None})
    report = run_kiosk_benchmark(options)
    return 0 if report["strategies"] else 1


def run_scale(args: argparse.Namespace) -> int:
    from bench.scale import ScaleOptions, run_scale_benchmark

    _exit_on_sigterm()

    options = ScaleOptions.from_args(args)
    run_scale_benchmark(options)
    return 0
