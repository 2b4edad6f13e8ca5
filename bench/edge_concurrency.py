"""Many kiosks, one device: 1, 2, 4 and 8 concurrent streaming clients on the edge path.

Targets, all on the embedded model, the same kiosk questions sharing one system prompt, greedy, streamed:
  * gateway: ``edgecloud serve`` with continuous batching (``[edge] parallel`` = ``--parallel``);
  * gateway_seq: the same gateway with ``parallel = 1``, the one-at-a-time runner (the "no loss at one
    stream" reference);
  * llama_server_np1 / llama_server_npN (with ``--llama-server BIN``): llama.cpp's C++ server with
    ``-np 1`` and ``-np N`` (``-c`` 2048 per slot, ``--no-repack`` where the CPU has AMX).
A wave is ``c`` clients each sending one request at the same moment; waves are interleaved target by
target, level by level, round by round (the order of the targets rotates each round), because this
class of VM drifts 20-30% within minutes: only ratios measured in one run mean anything.
Per target and level: total tokens/s (a wave's tokens over its wall time, median over waves), TTFT
P50/P99, per-stream decode tokens/s (P50), and each server's RSS at ready and after the run.
Writes ``bench/results/edge_concurrency.json``.

    bash bench/build_llama_server.sh
    .venv/bin/python -m bench.edge_concurrency --llama-server build/llama-server/bin/llama-server
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.edge_overhead import QUESTIONS, RESULTS, SYSTEM, _cpu_model, _rss_mb, _wait_ready, percentile
from bench.local_run import embedded_model_or_say, free_port, stop_servers


def start_gateway(data_dir: Path, parallel: int) -> tuple[subprocess.Popen, str, float]:
    port = free_port()
    env = {**os.environ, "EDGECLOUD_SERVER_DATA_DIR": str(data_dir), "EDGECLOUD_CACHE_ENABLED": "false",
           "EDGECLOUD_LOGGING_LEVEL": "WARNING", "EDGECLOUD_EDGE_PARALLEL": str(parallel),
           "EDGECLOUD_EDGE_MAX_QUEUE": "16"}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "edge.cli", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    return proc, base, _wait_ready(proc, base + "/readyz", started)


def start_llama_server(binary: Path, model: Path, slots: int) -> tuple[subprocess.Popen, str, float]:
    from models.llama_runtime import use_extra_buffer_types

    port = free_port()
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(2048 * slots),
           "-np", str(slots), "--log-disable"]
    if not use_extra_buffer_types("auto"):
        cmd.append("--no-repack")
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    return proc, base, _wait_ready(proc, base + "/health", started)


def one_stream(base: str, model: str, question: str, max_tokens: int) -> dict[str, float | None]:
    """One streamed request: TTFT (ms), decode tokens/s after the first token, tokens."""
    import httpx

    body = {"model": model, "stream": True, "max_tokens": max_tokens, "temperature": 0.0,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]}
    started = time.perf_counter()
    first = last = None
    deltas = 0
    usage = None
    with httpx.Client(base_url=base, timeout=120) as client, client.stream("POST", "/v1/chat/completions",
                                                                         json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                usage = event["usage"].get("completion_tokens")
            choices = event.get("choices") or [{}]
            if (choices[0].get("delta") or {}).get("content"):
                now = time.perf_counter()
                first = first or now
                last = now
                deltas += 1
    tokens = usage or deltas
    if first is None:
        return {"ttft_ms": None, "decode_tps": None, "tokens": float(tokens), "end": time.perf_counter()}
    rate = (tokens - 1) / (last - first) if tokens > 1 and last and last > first else None
    return {"ttft_ms": (first - started) * 1000.0, "decode_tps": rate, "tokens": float(tokens),
            "end": time.perf_counter()}


def wave(base: str, model: str, questions: list[str], max_tokens: int) -> dict[str, Any]:
    """``len(questions)`` clients at once; the wave's total tokens/s and each stream's figures."""
    results: list[dict[str, float | None]] = [{} for _ in questions]

    def run(i: int) -> None:
        try:
            results[i] = one_stream(base, model, questions[i], max_tokens)
        except Exception as exc:  # a timed-out or refused stream is a figure (errors), not a crash
            results[i] = {"ttft_ms": None, "decode_tps": None, "tokens": 0.0, "end": time.perf_counter(),
                          "error": f"{type(exc).__name__}: {exc}"}

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(questions))]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = max(float(r["end"] or 0.0) for r in results) - started
    return {"total_tps": sum(float(r["tokens"] or 0.0) for r in results) / wall, "streams": results}


def summarize(waves: list[dict[str, Any]]) -> dict[str, float | None]:
    ttfts = [s["ttft_ms"] for w in waves for s in w["streams"] if s["ttft_ms"] is not None]
    rates = [s["decode_tps"] for w in waves for s in w["streams"] if s["decode_tps"] is not None]
    return {
        "total_tps_p50": statistics.median(w["total_tps"] for w in waves),
        "ttft_ms_p50": statistics.median(ttfts) if ttfts else None,
        "ttft_ms_p99": percentile(ttfts, 99) if ttfts else None,
        "ttft_ms_max": max(ttfts) if ttfts else None,
        "decode_tps_p50": statistics.median(rates) if rates else None,
        "waves": len(waves),
        "errors": sum(1 for w in waves for s in w["streams"] if s.get("error")),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", default="1,2,4,8", help="concurrent clients per wave")
    parser.add_argument("--parallel", type=int, default=4, help="the gateway's slots and llama-server's -np N")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--llama-server", type=Path, default=None)
    parser.add_argument("--no-seq", action="store_true", help="skip the one-at-a-time gateway")
    parser.add_argument("--out", type=Path, default=RESULTS / "edge_concurrency.json")
    args = parser.parse_args(argv)

    model = embedded_model_or_say()
    if model is None:
        return 2
    levels = [int(x) for x in args.levels.split(",")]
    procs: list[subprocess.Popen] = []
    servers: dict[str, dict[str, Any]] = {}
    targets: dict[str, tuple[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            # One at a time on an idle machine, so each ready time and RSS is its own.
            plan: list[tuple[str, Any]] = [("gateway", lambda: start_gateway(Path(tmp) / "p", args.parallel))]
            if not args.no_seq:
                plan.append(("gateway_seq", lambda: start_gateway(Path(tmp) / "s", 1)))
            if args.llama_server is not None:
                plan.append(("llama_server_np1", lambda: start_llama_server(args.llama_server, model, 1)))
                plan.append((f"llama_server_np{args.parallel}",
                             lambda: start_llama_server(args.llama_server, model, args.parallel)))
            for name, start in plan:
                proc, base, ready_s = start()
                procs.append(proc)
                servers[name] = {"ready_s": ready_s, "rss_mb_ready": _rss_mb(proc.pid), "pid": proc.pid}
                targets[name] = (base, "edgecloud-edge" if name.startswith("gateway") else "smollm2")
                # Warm-up: every slot reads the system prompt once, as after a few minutes of traffic.
                wave(base, targets[name][1], QUESTIONS[: max(levels)], 8)
            waves: dict[str, dict[int, list[dict[str, Any]]]] = {n: {c: [] for c in levels} for n in targets}
            names = list(targets)
            for round_no in range(args.rounds):
                order = names[round_no % len(names):] + names[: round_no % len(names)]
                for c in levels:
                    for name in order:
                        base, served = targets[name]
                        offset = (round_no * 7 + c) % len(QUESTIONS)
                        questions = [QUESTIONS[(offset + i) % len(QUESTIONS)] for i in range(c)]
                        result = wave(base, served, questions, args.max_tokens)
                        waves[name][c].append(result)
                        errors = sum(1 for st in result["streams"] if st.get("error"))
                        print(f"  round {round_no + 1} {name:20} c={c}: {result['total_tps']:.1f} tok/s"
                              + (f", {errors} errors" if errors else ""), flush=True)
            for info in servers.values():
                info["rss_mb_after"] = _rss_mb(int(info.pop("pid")))
        finally:
            stop_servers(procs)
    results = {name: {str(c): summarize(w) for c, w in by_level.items()} for name, by_level in waves.items()}
    peer = f"llama_server_np{args.parallel}"
    ratios: dict[str, float | None] = {}
    if peer in results and "4" in results["gateway"]:
        ratios["total_tps_4_gateway_over_npN"] = _ratio(results["gateway"]["4"]["total_tps_p50"],
                                                        results[peer]["4"]["total_tps_p50"])
        ratios["ttft_p50_4_gateway_over_npN"] = _ratio(results["gateway"]["4"]["ttft_ms_p50"],
                                                       results[peer]["4"]["ttft_ms_p50"])
    if "gateway_seq" in results and "1" in results["gateway"]:
        ratios["decode_1_gateway_over_seq"] = _ratio(results["gateway"]["1"]["decode_tps_p50"],
                                                     results["gateway_seq"]["1"]["decode_tps_p50"])
        ratios["ttft_p50_1_gateway_over_seq"] = _ratio(results["gateway"]["1"]["ttft_ms_p50"],
                                                       results["gateway_seq"]["1"]["ttft_ms_p50"])
    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "processor": _cpu_model(), "loadavg_at_end": os.getloadavg()},
        "model": model.name, "parallel": args.parallel, "levels": levels, "rounds": args.rounds,
        "max_tokens": args.max_tokens, "results": results, "servers": servers, "ratios": ratios,
        "targets": {"total_tps_4_gateway_over_npN_min": 1.0, "ttft_p50_4_gateway_over_npN_max": 1.1,
                    "decode_and_ttft_1_vs_seq": "decode >= 0.97x, TTFT <= 1/0.97x", "rss_mb_ready_max": 260},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"{'target':22}{'c':>3}{'total tok/s':>13}{'TTFT p50':>10}{'TTFT p99':>10}{'stream tok/s':>14}")
    for name, by_level in results.items():
        for c, r in by_level.items():
            print(f"{name:22}{c:>3}{r['total_tps_p50']:13.1f}{r['ttft_ms_p50'] or 0:10.0f}{r['ttft_ms_p99'] or 0:10.0f}"
                  f"{r['decode_tps_p50'] or 0:14.1f}")
    for key, value in ratios.items():
        print(f"{key}: {value:.2f}x" if value is not None else f"{key}: n/a")
    for name, info in servers.items():
        print(f"{name}: ready in {info['ready_s']:.2f} s, RSS {info['rss_mb_ready']:.0f} MB at ready, "
              f"{info['rss_mb_after']:.0f} MB after")
    print(f"load average at the end: {os.getloadavg()}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
