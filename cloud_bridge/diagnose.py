"""``edgecloud diagnose cloud``: where does the time of a cloud call go, and what to do about it.

A kiosk operator sees "the cloud is slow"; this sends N timed requests per provider through the
same client the gateway uses (retries off, so every fault is visible), prints the phases like
``curl -w`` would (DNS, TCP connect, TLS, request sent, first byte, first token, last token),
tokens/s, error and 429 counts, and turns the breakdown into plain-language findings.

The config comes from ``--config FILE`` (its ``[cloud]`` section) and the ``EDGECLOUD_CLOUD_*``
environment variables; this module must not import ``edge``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from cloud_bridge.config import CloudConfig, ProviderConfig
from cloud_bridge.errors import CloudError
from cloud_bridge.percentile import nearest_rank
from cloud_bridge.redact import Redactor, provider_secrets, safe_url

if TYPE_CHECKING:  # the client (httpx, h2) is imported when the command runs, not when the CLI is built
    from cloud_bridge.client import CallRecord, CloudBridge, StreamDone

PHASES = ("dns", "connect", "tls", "request_sent", "first_byte", "first_token", "last_token", "total")
PHASE_LABELS = {
    "dns": "DNS lookup",
    "connect": "TCP connect",
    "tls": "TLS handshake",
    "request_sent": "request sent",
    "first_byte": "first byte (wait)",
    "first_token": "first token",
    "last_token": "last token (gen)",
    "total": "total",
}
DEFAULT_PROMPT = "In one short sentence: why is the sky blue?"


@dataclass
class PhaseStat:
    median_ms: float | None
    p99_ms: float | None
    n: int


@dataclass
class ProviderReport:
    """One provider's measurements; ``findings`` are the plain-language conclusions."""

    name: str
    base_url: str
    model: str
    samples: int
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    rate_limited: int = 0
    http_version: str = ""
    reused: int = 0
    phases: dict[str, PhaseStat] = field(default_factory=dict)
    cold: dict[str, float | None] = field(default_factory=dict)
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    tokens_per_s: float | None = None
    error_messages: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)


def _share(part: float | None, whole: float | None) -> float:
    if not part or not whole:
        return 0.0
    return part / whole


def findings(report: ProviderReport) -> list[str]:
    """Plain-language conclusions from the breakdown, most important first."""
    out: list[str] = []
    failed = sum(report.errors.values())
    if report.ok == 0:
        kinds = ", ".join(f"{k} x{v}" for k, v in sorted(report.errors.items()))
        out.append(f"every request failed ({kinds}): fix this first; first error: "
                   f"{report.error_messages[0] if report.error_messages else 'unknown'}")
    elif failed:
        kinds = ", ".join(f"{k} x{v}" for k, v in sorted(report.errors.items()))
        out.append(f"{failed} of {report.samples} requests failed ({kinds}).")
    if report.rate_limited:
        out.append(f"429s ({report.rate_limited} of {report.samples}): you are at the provider's rate limit; "
                   "lower concurrency, ask for a higher tier, or add a second provider/region to fail over to.")
    if "auth" in report.errors:
        out.append("authentication failed: check the API key (EDGECLOUD_CLOUD_API_KEY or api_key_env/file).")
    if report.ok == 0:
        return out
    cold = report.cold
    cold_total = cold.get("total")
    setup = sum(v for k in ("dns", "connect", "tls") if (v := cold.get(k)) is not None)
    share = _share(setup, cold_total)
    if cold_total and share >= 0.3:
        out.append(f"connect is {share:.0%} of the time of a call on a new connection ({setup:.0f} ms of "
                   f"{cold_total:.0f} ms): the route to this region is slow; use a nearer region or a dedicated "
                   "line. The gateway keeps connections warm, so only calls after a long idle pay this.")
    dns = report.phases.get("dns")
    if dns and dns.median_ms is not None and dns.median_ms > 100:
        out.append(f"DNS takes {dns.median_ms:.0f} ms: use a local caching resolver on the kiosk.")
    connect = report.phases.get("connect")
    tls = report.phases.get("tls")
    if connect and connect.median_ms is not None and connect.median_ms > 150:
        out.append(f"one network round trip is about {connect.median_ms:.0f} ms (TCP connect): the provider's "
                   "region is far away; a nearer region or an in-country provider would cut every phase.")
    if (tls and connect and tls.median_ms is not None and connect.median_ms
            and tls.median_ms > 3 * connect.median_ms and tls.median_ms > 50):
        out.append(f"the TLS handshake ({tls.median_ms:.0f} ms) is much slower than a round trip "
                   f"({connect.median_ms:.0f} ms): a TLS-inspecting proxy or a slow certificate check is in "
                   "the way.")
    if report.ttft_p50_ms and report.ttft_p99_ms and report.ttft_p99_ms >= 3 * report.ttft_p50_ms:
        ratio = report.ttft_p99_ms / report.ttft_p50_ms
        out.append(f"TTFT P99 is {ratio:.1f}x P50 ({report.ttft_p99_ms:.0f} vs {report.ttft_p50_ms:.0f} ms): "
                   "the provider queues unpredictably; let the router hedge with the edge model after about the "
                   "P95, or prefer a less loaded region/provider.")
    wait = report.phases.get("first_byte")
    if wait and wait.median_ms is not None and report.ttft_p50_ms and wait.median_ms >= 0.6 * report.ttft_p50_ms \
            and report.ttft_p50_ms > 500:
        out.append(f"most of the time to first token ({wait.median_ms:.0f} of {report.ttft_p50_ms:.0f} ms) is "
                   "waiting for the provider to answer at all: the delay is on the provider's side (queue, "
                   "prompt processing), not the network; a shorter prompt or a smaller model helps.")
    if report.tokens_per_s is not None and report.tokens_per_s < 15:
        out.append(f"generation is slow ({report.tokens_per_s:.1f} tokens/s): long answers will feel sluggish; "
                   "cap max_tokens or use a faster model.")
    if report.base_url.startswith("https") and report.http_version and report.http_version != "HTTP/2":
        out.append(f"the server answered over {report.http_version}, not HTTP/2: concurrent escalations each "
                   "need their own connection (and handshake).")
    if not out:
        out.append(f"no problem found: connection set-up is {share:.0%} of a cold call and warm calls reuse the "
                   "pooled connection.")
    return out


async def _one_call(
    bridge: CloudBridge, body: dict[str, Any], records: list[CallRecord]
) -> tuple[StreamDone | None, CloudError | None]:
    from cloud_bridge.client import ContentDelta

    done: StreamDone | None = None
    try:
        async for item in bridge.stream_chat(body, request_id=f"diagnose-{uuid.uuid4().hex[:12]}"):
            if not isinstance(item, ContentDelta):
                done = item
    except CloudError as err:
        return None, err
    return done, None


async def diagnose_provider(
    prov: ProviderConfig,
    samples: int,
    *,
    prompt: str = DEFAULT_PROMPT,
    max_tokens: int = 48,
    fresh_connections: bool = False,
    interval_s: float = 0.0,
) -> ProviderReport:
    """Run ``samples`` sequential calls to one provider and summarise them."""
    from cloud_bridge.client import CloudBridge

    measured = prov.model_copy(update={
        "max_retries": 0,
        "breaker_consecutive_failures": 10**9,
        "breaker_min_calls": 10**9,
    })
    cloud = CloudConfig(providers=[measured], warmup=False, keep_warm=False)
    records: list[CallRecord] = []
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0}
    durations: list[dict[str, float | None]] = []
    ttfts: list[float] = []
    rates: list[float] = []
    report = ProviderReport(name=prov.name, base_url=safe_url(prov.base_url), model=prov.model, samples=samples)
    redact = Redactor(provider_secrets(prov))
    errors: Counter[str] = Counter()
    bridge = CloudBridge(cloud, on_call=records.append)
    try:
        for i in range(samples):
            if fresh_connections and i:
                await bridge.aclose()
                bridge = CloudBridge(cloud, on_call=records.append)
            done, err = await _one_call(bridge, body, records)
            if err is not None:
                errors[err.kind] += 1
                if err.status == 429:
                    report.rate_limited += 1
                if len(report.error_messages) < 3:
                    report.error_messages.append(redact(err.message))
            elif done is not None:
                report.ok += 1
                t = done.timings
                report.http_version = t.http_version or report.http_version
                report.reused += int(t.connection_reused)
                d = t.durations()
                durations.append(d)
                if not t.connection_reused and not report.cold:
                    report.cold = d  # the first call that paid DNS/TCP/TLS
                if t.first_token_ms is not None:
                    ttfts.append(t.first_token_ms - t.attempt_start_ms)
                tokens = (done.usage or {}).get("completion_tokens")
                if tokens and t.first_token_ms is not None and t.last_token_ms and tokens > 1:
                    span = (t.last_token_ms - t.first_token_ms) / 1000.0
                    if span > 0:
                        rates.append((tokens - 1) / span)
            if interval_s and i + 1 < samples:
                await asyncio.sleep(interval_s)
    finally:
        await bridge.aclose()
    report.errors = dict(errors)
    for phase in PHASES:
        values = [v for d in durations if (v := d.get(phase)) is not None]
        report.phases[phase] = PhaseStat(
            median_ms=statistics.median(values) if values else None, p99_ms=nearest_rank(values, 0.99), n=len(values)
        )
    report.ttft_p50_ms = statistics.median(ttfts) if ttfts else None
    report.ttft_p99_ms = nearest_rank(ttfts, 0.99)
    report.tokens_per_s = statistics.median(rates) if rates else None
    report.findings = findings(report)
    return report


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:9.1f}"


def render(report: ProviderReport) -> str:
    """The human table, one block per provider."""
    lines = [
        f"provider {report.name}  {report.base_url}  model {report.model}  {report.http_version or '?'}",
        f"  samples {report.samples}: ok {report.ok}, errors {sum(report.errors.values())}"
        f"{' (' + ', '.join(f'{k} x{v}' for k, v in sorted(report.errors.items())) + ')' if report.errors else ''}"
        f", 429s {report.rate_limited}, reused connection {report.reused}",
        f"  {'phase':<20}{'median ms':>10}{'p99 ms':>10}{'n':>5}{'cold ms':>10}",
    ]
    for phase in PHASES:
        stat = report.phases.get(phase)
        if stat is None:
            continue
        lines.append(f"  {PHASE_LABELS[phase]:<20}{_fmt(stat.median_ms):>10}{_fmt(stat.p99_ms):>10}"
                     f"{stat.n:>5}{_fmt(report.cold.get(phase)):>10}")
    lines.append(f"  {'TTFT':<20}{_fmt(report.ttft_p50_ms):>10}{_fmt(report.ttft_p99_ms):>10}")
    rate = "-" if report.tokens_per_s is None else f"{report.tokens_per_s:.1f}"
    lines.append(f"  tokens/s (median)   {rate}")
    lines.append("  findings:")
    lines.extend(f"   - {f}" for f in report.findings)
    return "\n".join(lines)


async def run_diagnosis(
    config: CloudConfig, provider: str | None, samples: int, **kwargs: Any
) -> list[ProviderReport]:
    chosen = [p for p in config.providers if p.base_url and (provider is None or p.name == provider)]
    return [await diagnose_provider(p, samples, **kwargs) for p in chosen]


def _command(args: argparse.Namespace) -> int:
    try:
        config = CloudConfig.from_env_and_toml(args.config)
    except (OSError, ValueError) as exc:
        print(f"edgecloud diagnose: cannot read the configuration: {exc}", file=sys.stderr)
        return 2
    if args.samples < 1:
        print("edgecloud diagnose: --samples must be at least 1", file=sys.stderr)
        return 2
    names = [p.name for p in config.providers if p.base_url]
    if not names:
        print("edgecloud diagnose: no cloud provider configured (set EDGECLOUD_CLOUD_BASE_URL, "
              "EDGECLOUD_CLOUD_API_KEY, EDGECLOUD_CLOUD_MODEL or pass --config)", file=sys.stderr)
        return 2
    if args.provider and args.provider not in names:
        print(f"edgecloud diagnose: unknown provider {args.provider!r} (have: {', '.join(names)})", file=sys.stderr)
        return 2
    started = time.time()
    reports = asyncio.run(run_diagnosis(
        config, args.provider, args.samples, prompt=args.prompt, max_tokens=args.max_tokens,
        fresh_connections=args.fresh_connections, interval_s=args.interval,
    ))
    redact = Redactor(s for p in config.providers for s in provider_secrets(p))
    if args.json:
        payload = {"started_at": started, "samples": args.samples, "providers": [asdict(r) for r in reports]}
        print(redact(json.dumps(payload, indent=2)))
    else:
        print(redact("\n\n".join(render(r) for r in reports)))
    return 0 if all(r.ok for r in reports) else 1


def register(subparsers: Any) -> None:
    """Add ``diagnose cloud`` to the ``edgecloud`` command line (called by ``edge/cli.py``)."""
    diagnose = subparsers.add_parser("diagnose", help="find where latency hides (cloud network phases)")
    targets = diagnose.add_subparsers(dest="target", metavar="TARGET")
    targets.required = True
    cloud = targets.add_parser("cloud", help="time N requests per cloud provider and explain the breakdown")
    cloud.add_argument("--provider", default=None, help="only this provider (default: all)")
    cloud.add_argument("--samples", type=int, default=10, help="requests per provider (default 10)")
    cloud.add_argument("--json", action="store_true", help="machine-readable output")
    cloud.add_argument("--config", default=None, help="TOML file with a [cloud] section (else EDGECLOUD_CONFIG)")
    cloud.add_argument("--prompt", default=DEFAULT_PROMPT, help="the test prompt")
    cloud.add_argument("--max-tokens", type=int, default=48)
    cloud.add_argument("--interval", type=float, default=0.0, help="seconds between samples")
    cloud.add_argument("--fresh-connections", action="store_true",
                       help="open a new connection for every sample (measures DNS/TCP/TLS each time)")
    cloud.set_defaults(func=_command)


def main(argv: list[str] | None = None) -> int:
    """``python -m cloud_bridge.diagnose cloud ...`` without the gateway's CLI."""
    parser = argparse.ArgumentParser(prog="edgecloud")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["diagnose", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
