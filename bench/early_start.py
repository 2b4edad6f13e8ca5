"""Time to first token of the requests the encoder decides, with each ``[router] early_start`` mode.

``bench/route_overhead.py`` times the decision alone, synchronously. This one runs the real thing: the
gateway's services (the embedded model on llama.cpp, both classifier stages on onnxruntime, the cloud client)
and a local fake cloud (``bench.fake_cloud``, first token after ``--cloud-ttft`` seconds) in one process, and
sends each request the n-gram stage is unsure of through ``Pipeline.start`` with the modes interleaved
(``off``, ``route``, ``both``, in an order that rotates per request). The time is until ``start`` returns:
the answer's first event in hand, which is what the gateway then writes to the kiosk. So it holds what the
synchronous figure leaves out: the encoder's worker thread, the early backends competing with it for the
cores, and the cancelled starts.

The requests are the single-turn rows of held-out kiosk sets (``--kiosk-dir``, default v45-v48: text the
router never trained on) that the n-gram stage is unsure of, each sent once per mode with ``max_tokens`` 1.

Prints P50/P99 per mode and route, the ratio of each mode's P50 and P99 to ``off``'s, and writes
``bench/results/early_start.json``.

    .venv/bin/python -m bench.early_start [--limit 200] [--cloud-ttft 0.3] [--kiosk-dir DIR ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.percentile import percentile

RESULTS = Path(__file__).resolve().parent / "results"
HELD_OUT = Path(__file__).resolve().parent.parent / "models" / "intent" / "data"
DEFAULT_SETS = tuple(HELD_OUT / f"heldout_v{n}" for n in (45, 46, 47, 48))
MODES = ("off", "route", "both")


def unsure_texts(classifier, dirs: tuple[Path, ...], limit: int) -> list[str]:
    """The single-turn texts of ``dirs`` the classifier's n-gram stage is unsure of, in file order."""
    out: list[str] = []
    for path in (p for d in dirs for p in sorted(Path(d).glob("*.jsonl"))):
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                text = row.get("text")
                if text and classifier.first_stage(text).needs_encoder:
                    out.append(text)
    return out[:limit]


async def measure(limit: int, cloud_ttft_s: float, dirs: tuple[Path, ...]) -> dict:
    from bench.fake_cloud import FakeCloudConfig, run_fake_cloud_in_thread
    from edge.assembly import build_services
    from edge.config import Settings
    from edge.schemas import parse_chat_request

    cloud = run_fake_cloud_in_thread(FakeCloudConfig(reply_text="From the cloud.", first_token_delay_s=cloud_ttft_s))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings.model_validate({
                "server": {"data_dir": tmp}, "metrics": {"enabled": False}, "cache": {"enabled": False},
                "cloud": {"providers": [{"name": "fake", "base_url": cloud.base_url, "api_key": "sk-bench-0000",
                                         "model": "fake-gpt"}]},
            })
            services = build_services(settings)
            await services.start()
            await services.loaded.wait()
            try:
                return await _run(services, settings, parse_chat_request, limit, dirs, cloud)
            finally:
                await services.aclose()
    finally:
        cloud.stop()


async def _run(services, settings, parse_chat_request, limit: int, dirs: tuple[Path, ...], cloud) -> dict:
    pipeline, router = services.pipeline, services.pipeline.router
    if router.classifier is None or router.classifier.encoder is None:
        raise RuntimeError("the classifier's encoder stage did not load")
    texts = unsure_texts(router.classifier, dirs, limit)
    times: dict[str, dict[str, list[float]]] = {mode: {"edge": [], "cloud": []} for mode in MODES}
    early: dict[str, dict[str, int]] = {mode: {"kept": 0, "switched": 0} for mode in MODES}
    for i, text in enumerate(texts):
        for k in range(len(MODES)):
            mode = MODES[(i + k) % len(MODES)]
            router.config.early_start = mode
            body = {"model": "edgecloud-auto", "max_tokens": 1, "stream": True,
                    "messages": [{"role": "system", "content": f"You are a mall kiosk. #{i}"},
                                 {"role": "user", "content": text}]}
            req = parse_chat_request(body, settings, {})
            began = time.perf_counter()
            answer = await pipeline.start(req)
            ttft_ms = (time.perf_counter() - began) * 1000.0
            async for _event in answer.events():
                pass
            times[mode][answer.route].append(ttft_ms)
            if answer.record.early_start:
                early[mode][answer.record.early_start] += 1
            await asyncio.sleep(0.05)  # let dropped starts settle before the next request
    router.config.early_start = settings.router.early_start

    def stats(values: list[float]) -> dict:
        if not values:
            return {"n": 0}
        return {"n": len(values), "p50_ms": percentile(values, 50), "p99_ms": percentile(values, 99)}

    report: dict = {"requests": len(texts), "cloud_ttft_s": cloud.config.first_token_delay_s,
                    "cloud_calls": cloud.state.chat_attempts, "modes": {}}
    for mode in MODES:
        all_times = times[mode]["edge"] + times[mode]["cloud"]
        report["modes"][mode] = {"all": stats(all_times), "edge": stats(times[mode]["edge"]),
                                 "cloud": stats(times[mode]["cloud"]), "early_start": early[mode]}
    base = report["modes"]["off"]
    for mode in MODES:
        for route in ("all", "edge", "cloud"):
            this, ref = report["modes"][mode][route], base[route]
            if this.get("n") and ref.get("n"):
                this["p50_vs_off"] = round(this["p50_ms"] / ref["p50_ms"], 3)
                this["p99_vs_off"] = round(this["p99_ms"] / ref["p99_ms"], 3)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=200, help="requests (each sent once per mode)")
    parser.add_argument("--cloud-ttft", type=float, default=0.3, metavar="S",
                        help="the fake cloud's time to first token (default 0.3 s)")
    parser.add_argument("--kiosk-dir", type=Path, action="append", default=[], metavar="DIR",
                        help="held-out *.jsonl folders to draw requests from (default: heldout_v45-v48)")
    parser.add_argument("--out", type=Path, default=RESULTS / "early_start.json")
    args = parser.parse_args(argv)
    report = asyncio.run(measure(args.limit, args.cloud_ttft, tuple(args.kiosk_dir) or DEFAULT_SETS))
    report["machine"] = {"cpus": os.cpu_count()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"{report['requests']} requests the n-gram stage is unsure of, each once per mode; fake cloud first token "
          f"{report['cloud_ttft_s']} s; cloud calls {report['cloud_calls']}")
    for mode, figures in report["modes"].items():
        print(f" early_start = {mode}: started early and used {figures['early_start']['kept']}, "
              f"not {figures['early_start']['switched']}")
        for route in ("all", "edge", "cloud"):
            s = figures[route]
            if not s.get("n"):
                continue
            ratio = f"   (vs off: p50 x{s['p50_vs_off']}, p99 x{s['p99_vs_off']})" if "p50_vs_off" in s else ""
            print(f"  {route:5} time to first event p50 {s['p50_ms']:7.1f} ms   p99 {s['p99_ms']:7.1f} ms"
                  f"   (n={s['n']}){ratio}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
