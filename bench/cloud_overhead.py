"""What does cloud_bridge cost, and what does it save? Time to first token and total time.

Three ways to make the same streamed call to the same local fake cloud (run in its own process,
so it does not share our GIL), interleaved in random order in one run so that load on the
machine hits all of them alike:

* ``fresh_client`` - a new ``httpx.AsyncClient`` per call (what ``async with httpx.AsyncClient()``
  per request does): pays client set-up (SSL context, CA bundle) and TCP (+TLS) every call;
* ``fresh_conn``   - one client with keep-alive off: a new TCP (+TLS) connection per call, i.e.
  the handshake cost alone;
* ``raw``          - one warm ``httpx.AsyncClient``, a minimal SSE loop: the floor;
* ``bridge``       - ``CloudBridge.stream_chat`` (warm pool, trace phases, timeouts, retry logic,
  strict SSE parser).

Targets: bridge - raw < 1 ms at the median; bridge beats fresh by the handshake cost.
``--setup-ms`` adds a per-connection delay in the fake (a stand-in for a far-away handshake).
Prints the figures and writes ``bench/results/cloud_overhead.json``.

    python -m bench.cloud_overhead --calls 200 [--http2-tls] [--setup-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import ssl
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from cloud_bridge import CloudBridge, CloudConfig, ContentDelta, ProviderConfig

RESULTS = Path(__file__).resolve().parent / "results"
BODY = {"messages": [{"role": "user", "content": "benchmark " + " ".join(f"w{i}" for i in range(30))}],
        "max_tokens": 64}
MODES = ("fresh_client", "fresh_conn", "raw", "bridge")


def start_fake(http2_tls: bool, setup_ms: float) -> tuple[subprocess.Popen[str], str, str | None]:
    cmd = [sys.executable, "-m", "bench.fake_cloud", "--set", f"connection_setup_s={setup_ms / 1000.0}"]
    if http2_tls:
        cmd.append("--http2-tls")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if not line or line[0] != "READY":
        proc.kill()
        raise RuntimeError("the fake cloud did not start")
    return proc, line[1], None if line[2] == "-" else line[2]


def _payload() -> dict[str, Any]:
    return {**BODY, "model": "fake-gpt", "stream": True, "stream_options": {"include_usage": True}}


async def raw_call(client: httpx.AsyncClient, url: str) -> tuple[float, float]:
    """The floor: a plain streamed POST and the least SSE handling that finds the tokens.

    Raw bytes split on blank lines (no text decoding, no line iterator, no timeouts, no trace):
    anything cheaper would not be parsing the stream at all.
    """
    start = time.perf_counter()
    ttft = None
    buf = b""
    async with client.stream("POST", url, json=_payload(), headers={"authorization": "Bearer sk-bench"}) as resp:
        async for chunk in resp.aiter_bytes():
            buf += chunk
            *events, buf = buf.split(b"\n\n")
            for event in events:
                if not event.startswith(b"data: "):
                    continue
                data = event[6:]
                if data == b"[DONE]":
                    break
                obj = json.loads(data)
                choices = obj.get("choices") or []
                if ttft is None and choices and choices[0].get("delta", {}).get("content"):
                    ttft = time.perf_counter() - start
    total = time.perf_counter() - start
    return (ttft if ttft is not None else total), total


async def bridge_call(bridge: CloudBridge) -> tuple[float, float]:
    start = time.perf_counter()
    ttft = None
    async for item in bridge.stream_chat(BODY, request_id="bench"):
        if ttft is None and isinstance(item, ContentDelta):
            ttft = time.perf_counter() - start
    total = time.perf_counter() - start
    return (ttft if ttft is not None else total), total


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {"median_ms": statistics.median(ordered) * 1e3, "p99_ms": p99 * 1e3,
            "mean_ms": statistics.fmean(ordered) * 1e3}


async def run(calls: int, base_url: str, ca_file: str | None, http2: bool, seed: int) -> dict[str, Any]:
    verify: bool | ssl.SSLContext = ssl.create_default_context(cafile=ca_file) if ca_file else True
    url = base_url.rstrip("/") + "/chat/completions"
    warm = httpx.AsyncClient(http2=http2, verify=verify, timeout=30)
    no_keepalive = httpx.AsyncClient(http2=http2, verify=verify, timeout=30,
                                     limits=httpx.Limits(max_keepalive_connections=0))
    bridge = CloudBridge(CloudConfig(providers=[ProviderConfig(
        name="bench", base_url=base_url, api_key="sk-bench", verify_tls=ca_file or True, http2=http2,
        model="fake-gpt")], keep_warm=False))
    await bridge.start()
    for _ in range(10):  # warm both pools and the code paths
        await raw_call(warm, url)
        await bridge_call(bridge)
    results: dict[str, dict[str, list[float]]] = {m: {"ttft": [], "total": [], "cpu": []} for m in MODES}
    rng = random.Random(seed)
    for _ in range(calls):
        order = list(MODES)
        rng.shuffle(order)
        for mode in order:
            cpu0 = time.process_time()
            if mode == "fresh_client":
                async with httpx.AsyncClient(http2=http2, verify=verify, timeout=30) as fresh:
                    ttft, total = await raw_call(fresh, url)
            elif mode == "fresh_conn":
                ttft, total = await raw_call(no_keepalive, url)
            elif mode == "raw":
                ttft, total = await raw_call(warm, url)
            else:
                ttft, total = await bridge_call(bridge)
            results[mode]["ttft"].append(ttft)
            results[mode]["total"].append(total)
            # CPU time of this process for the call: robust to other load on the machine.
            results[mode]["cpu"].append(time.process_time() - cpu0)
    await warm.aclose()
    await no_keepalive.aclose()
    await bridge.aclose()
    out: dict[str, Any] = {m: {k: summary(v) for k, v in results[m].items()} for m in MODES}
    b, r, f, fc = out["bridge"], out["raw"], out["fresh_client"], out["fresh_conn"]
    out["comparison"] = {
        "bridge_minus_raw_ttft_median_ms": b["ttft"]["median_ms"] - r["ttft"]["median_ms"],
        "bridge_minus_raw_total_median_ms": b["total"]["median_ms"] - r["total"]["median_ms"],
        "bridge_over_raw_ttft_ratio": b["ttft"]["median_ms"] / r["ttft"]["median_ms"],
        "bridge_minus_raw_cpu_median_ms": b["cpu"]["median_ms"] - r["cpu"]["median_ms"],
        "fresh_conn_minus_bridge_ttft_median_ms": fc["ttft"]["median_ms"] - b["ttft"]["median_ms"],
        "fresh_conn_over_bridge_ttft_ratio": fc["ttft"]["median_ms"] / b["ttft"]["median_ms"],
        "fresh_minus_bridge_ttft_median_ms": f["ttft"]["median_ms"] - b["ttft"]["median_ms"],
        "fresh_over_bridge_ttft_ratio": f["ttft"]["median_ms"] / b["ttft"]["median_ms"],
        "fresh_over_bridge_total_ratio": f["total"]["median_ms"] / b["total"]["median_ms"],
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cloud_overhead", description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per mode (default 200)")
    parser.add_argument("--http2-tls", action="store_true", help="HTTP/2 over TLS (hypercorn) instead of HTTP/1.1")
    parser.add_argument("--setup-ms", type=float, default=0.0, help="extra per-connection delay in the fake")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=str(RESULTS / "cloud_overhead.json"))
    args = parser.parse_args(argv)
    proc, base_url, ca_file = start_fake(args.http2_tls, args.setup_ms)
    try:
        figures = asyncio.run(run(args.calls, base_url, ca_file, args.http2_tls, args.seed))
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    transport = "HTTP/2+TLS (hypercorn)" if args.http2_tls else "HTTP/1.1 (uvicorn)"
    print(f"cloud_overhead: {args.calls} calls per mode, {transport}, setup delay {args.setup_ms:g} ms")
    print(f"{'mode':<13}{'TTFT p50':>10}{'TTFT p99':>10}{'total p50':>11}{'total p99':>11}{'CPU p50':>9}   (ms)")
    for mode in MODES:
        t, tot, cpu = figures[mode]["ttft"], figures[mode]["total"], figures[mode]["cpu"]
        print(f"{mode:<13}{t['median_ms']:>10.2f}{t['p99_ms']:>10.2f}{tot['median_ms']:>11.2f}{tot['p99_ms']:>11.2f}"
              f"{cpu['median_ms']:>9.2f}")
    c = figures["comparison"]
    print(f"bridge - raw warm httpx, median TTFT: {c['bridge_minus_raw_ttft_median_ms']:+.3f} ms "
          f"(total {c['bridge_minus_raw_total_median_ms']:+.3f} ms, client CPU per call "
          f"{c['bridge_minus_raw_cpu_median_ms']:+.3f} ms; target < 1 ms)")
    print(f"fresh connection - bridge, median TTFT: {c['fresh_conn_minus_bridge_ttft_median_ms']:+.3f} ms "
          f"(ratio {c['fresh_conn_over_bridge_ttft_ratio']:.2f}x); fresh client - bridge: "
          f"{c['fresh_minus_bridge_ttft_median_ms']:+.3f} ms (ratio {c['fresh_over_bridge_ttft_ratio']:.2f}x)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {"benchmark": "cloud_overhead", "calls": args.calls, "transport": transport,
              "setup_ms": args.setup_ms, "python": platform.python_version(), "machine": platform.machine(),
              "time": time.time(), **figures}
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
