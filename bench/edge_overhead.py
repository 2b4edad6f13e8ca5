"""Edge path overhead: llama-cpp-python called directly vs. the gateway over HTTP, streaming.

The same 20 kiosk questions, sharing one system prompt, greedy, 64 tokens, against up to three targets:
  * gateway: ``edgecloud serve`` as a subprocess, ``POST /v1/chat/completions`` (model ``edgecloud-edge``,
    streaming with usage) through httpx, timed at the client;
  * llama_server (with ``--llama-server BIN``): llama.cpp's C++ server on the same GGUF with its defaults,
    driven by the same client code;
  * direct: ``Llama(model_path)`` with llama-cpp-python's defaults, ``create_chat_completion(stream=True)``.
The targets are interleaved prompt by prompt over ``--rounds`` rounds, because this class of VM drifts
20-30% in speed within minutes: only ratios measured in one run mean anything. Also: each server's time
from start to a 200 on its health URL and its resident memory. Writes ``bench/results/edge_overhead.json``.

    bash bench/build_llama_server.sh            # once: builds llama-server from our llama-cpp-python's sdist
    .venv/bin/python -m bench.edge_overhead --llama-server build/llama-server/bin/llama-server

The issue quotes llama-server at a TTFT median of 19-27 ms and 86-94 tokens/s, ready in 0.56 s at
180 MB, on another machine of this class; this benchmark measures it beside the gateway instead.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.local_run import embedded_model_or_say, free_port, stop_servers
from bench.percentile import percentile

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


def summarize(ttfts: list[float], rates: list[float]) -> dict[str, float]:
    return {
        "ttft_ms_p50": statistics.median(ttfts),
        "ttft_ms_p90": percentile(ttfts, 90),
        "ttft_ms_max": max(ttfts),
        "decode_tps_p50": statistics.median(rates),
        "decode_tps_min": min(rates),
    }


def paired_ratio(ours: list[float | None], theirs: list[float | None], resamples: int = 2000,
                 seed: int = 0) -> dict[str, Any]:
    """Median of the per-prompt ratios ours/theirs, with a bootstrap 95% confidence interval.

    The targets answer each prompt back to back, so a ratio per prompt cancels most of the VM's drift
    and the prompts' own spread; the interval says whether "0.98x" differs from 1.0x or is noise.
    """
    ratios = [a / b for a, b in zip(ours, theirs, strict=True) if a is not None and b is not None and b > 0]
    if not ratios:
        return {"median": None, "ci95": [None, None], "n": 0}
    draw = random.Random(seed)
    medians = sorted(statistics.median(draw.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return {"median": statistics.median(ratios),
            "ci95": [percentile(medians, 2.5), percentile(medians, 97.5)], "n": len(ratios)}


def _direct_session(model_path: Path) -> Any:
    from models.llama_runtime import open_llama

    # llama-cpp-python's defaults, except llama.cpp's AMX kernels off on CPUs that have AMX (they
    # segfault there: models/llama_runtime.py); elsewhere this is exactly ``Llama(model_path)``.
    llama = open_llama(model_path, verbose=False)

    def one(question: str, max_tokens: int) -> tuple[float | None, float | None]:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        chunks = llama.create_chat_completion(messages, stream=True, max_tokens=max_tokens, temperature=0.0)
        return _time_stream(chunk["choices"][0]["delta"].get("content") for chunk in chunks)

    return one


def _time_stream(contents: Iterator[str | None]) -> tuple[float | None, float | None]:
    """TTFT (ms) and decode tokens/s of a lazy stream of content deltas, timed from its first pull
    (which is when the request starts: both sessions hand over unstarted generators)."""
    started = time.perf_counter()
    first = last = None
    n = 0
    for text in contents:
        if text:
            now = time.perf_counter()
            first = first or now
            last = now
            n += 1
    return _measure(started, first, last, n)


def _measure(started: float, first: float | None, last: float | None, n: int) -> tuple[float | None, float | None]:
    if first is None:
        return None, None
    rate = (n - 1) / (last - first) if n > 1 and last is not None and last > first else None
    return (first - started) * 1000.0, rate


def _http_session(base: str, model: str) -> Any:
    """One kiosk client for both HTTP servers (the gateway and llama-server): same body, same SSE parse."""
    import httpx

    client = httpx.Client(base_url=base, timeout=60)

    def contents(question: str, max_tokens: int) -> Iterator[str | None]:
        body = {"model": model, "stream": True, "max_tokens": max_tokens, "temperature": 0.0,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]}
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    yield (choices[0].get("delta") or {}).get("content")

    def one(question: str, max_tokens: int) -> tuple[float | None, float | None]:
        return _time_stream(contents(question, max_tokens))

    return one


def _wait_ready(proc: subprocess.Popen, url: str, started: float) -> float:
    import httpx

    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}) before {url} answered 200")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return time.perf_counter() - started
        except httpx.HTTPError:
            pass
        if time.perf_counter() - started > 60:
            raise RuntimeError(f"{url} not ready in 60 s")
        time.sleep(0.01)


def start_gateway(data_dir: Path) -> tuple[subprocess.Popen, str, float]:
    port = free_port()
    env = {**os.environ, "EDGECLOUD_SERVER_DATA_DIR": str(data_dir), "EDGECLOUD_CACHE_ENABLED": "false",
           "EDGECLOUD_LOGGING_LEVEL": "WARNING"}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "edge.cli", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    return proc, base, _wait_ready(proc, base + "/readyz", started)


def start_llama_server(binary: Path, model: Path) -> tuple[subprocess.Popen, str, float]:
    """llama.cpp's C++ server on the same model with its defaults (threads, batch, prompt cache), and
    ``--no-repack`` where the CPU has AMX, exactly as the gateway decides (models/llama_runtime.py)."""
    from models.llama_runtime import use_extra_buffer_types

    port = free_port()
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "2048",
           "--log-disable"]
    if not use_extra_buffer_types("auto"):
        cmd.append("--no-repack")
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    return proc, base, _wait_ready(proc, base + "/health", started)


def _rss_mb(pid: int) -> float:
    import psutil

    return psutil.Process(pid).memory_info().rss / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every prompt per target")
    parser.add_argument("--llama-server", type=Path, default=None,
                        help="llama.cpp's llama-server binary (bench/build_llama_server.sh builds the one "
                             "vendored in our llama-cpp-python) to measure in the same run")
    parser.add_argument("--no-direct", action="store_true", help="skip llama-cpp-python called in-process")
    parser.add_argument("--out", type=Path, default=RESULTS / "edge_overhead.json")
    args = parser.parse_args(argv)

    model = embedded_model_or_say()
    if model is None:
        return 2
    questions = QUESTIONS[: args.prompts]
    procs: list[subprocess.Popen] = []
    servers: dict[str, dict[str, float]] = {}
    sessions: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            # Servers start one at a time on an idle machine, so each ready time is its own.
            proc, base, ready_s = start_gateway(Path(tmp))
            procs.append(proc)
            servers["gateway"] = {"ready_s": ready_s, "rss_mb_ready": _rss_mb(proc.pid), "pid": proc.pid}
            sessions["gateway"] = _http_session(base, "edgecloud-edge")
            if args.llama_server is not None:
                proc, base, ready_s = start_llama_server(args.llama_server, model)
                procs.append(proc)
                servers["llama_server"] = {"ready_s": ready_s, "rss_mb_ready": _rss_mb(proc.pid), "pid": proc.pid}
                sessions["llama_server"] = _http_session(base, "smollm2")
            if not args.no_direct:
                sessions["direct"] = _direct_session(model)
            for one in sessions.values():  # warm-up: the first request prefills the system prompt
                one(questions[0], args.max_tokens)
            # Figures in prompt order, None where a stream gave none, so that two targets' answers to one
            # prompt in one round can be compared with each other (paired_ratio).
            paired: dict[str, dict[str, list[float | None]]] = {k: {"ttft_ms": [], "decode_tps": []}
                                                                for k in sessions}
            # Interleaved: every round runs each target on every prompt, so a drift of the machine's
            # speed (this VM's moves 20-30% within minutes) hits all targets alike.
            for _ in range(args.rounds):
                for q in questions:
                    for name, one in sessions.items():
                        ttft, rate = one(q, args.max_tokens)
                        paired[name]["ttft_ms"].append(ttft)
                        paired[name]["decode_tps"].append(rate)
            for info in servers.values():
                info["rss_mb_after"] = _rss_mb(int(info.pop("pid")))
        finally:
            stop_servers(procs)
    samples = {name: {figure: [v for v in values if v is not None] for figure, values in figures.items()}
               for name, figures in paired.items()}
    results = {name: {**summarize(s["ttft_ms"], s["decode_tps"]), **s} for name, s in samples.items()}
    ratios: dict[str, float] = {}
    for peer in ("llama_server", "direct"):
        if peer in results:
            ratios[f"ttft_p50_gateway_over_{peer}"] = results["gateway"]["ttft_ms_p50"] / results[peer]["ttft_ms_p50"]
            ratios[f"decode_tps_p50_gateway_over_{peer}"] = (
                results["gateway"]["decode_tps_p50"] / results[peer]["decode_tps_p50"])
    paired_ratios = {
        f"{figure}_gateway_over_{peer}": paired_ratio(paired["gateway"][figure], paired[peer][figure])
        for peer in ("llama_server", "direct") if peer in paired for figure in ("ttft_ms", "decode_tps")
    }
    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "processor": _cpu_model()},
        "model": model.name, "prompts": len(questions), "rounds": args.rounds, "max_tokens": args.max_tokens,
        "results": results, "servers": servers, "ratios": ratios, "paired_ratios": paired_ratios,
        "targets": {"gateway_ready_s_max": 1.5, "gateway_rss_mb_max": 260,
                    "ttft_and_decode": "gateway at least matches llama-server (ratios measured in this run)"},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    labels = {"gateway": "gateway over HTTP", "llama_server": "llama-server over HTTP",
              "direct": "llama-cpp-python direct"}
    print(f"{'':28}{'TTFT p50 ms':>12}{'TTFT p90 ms':>12}{'decode tok/s p50':>18}")
    for name, r in results.items():
        print(f"{labels[name]:28}{r['ttft_ms_p50']:12.1f}{r['ttft_ms_p90']:12.1f}{r['decode_tps_p50']:18.1f}")
    for key, value in ratios.items():
        print(f"{key}: {value:.2f}x")
    for key, one in paired_ratios.items():
        if one["n"]:
            print(f"paired {key}: median {one['median']:.3f}x, 95% CI {one['ci95'][0]:.3f}-{one['ci95'][1]:.3f}x "
                  f"over {one['n']} prompt pairs")
    for name, info in servers.items():
        print(f"{labels[name]}: ready in {info['ready_s']:.2f} s, RSS {info['rss_mb_ready']:.0f} MB at ready, "
              f"{info['rss_mb_after']:.0f} MB after the run")
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
