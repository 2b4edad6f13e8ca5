"""Figures of one strategy's requests: percentiles per route, tokens, cost, errors, complex-to-edge.

Pure functions over plain records, so the same code summarises a live run and a test's hand-made
records. Percentiles are linear-interpolated (numpy's default), which keeps P50 <= P95 <= P99 by
construction; a group with no sample reports ``None`` rather than a made-up zero.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from bench.fake_cloud import ttft_lognormal
from bench.percentile import percentiles

ROUTES = ("edge", "cloud", "cache")


@dataclass
class RequestResult:
    """One request as the kiosk saw it."""

    strategy: str
    session: int
    kiosk: int
    turn: int
    kind: str
    label: str
    dataset_label: str
    lang: str
    source: str
    status: int = 0
    route: str | None = None
    reason: str | None = None
    cache: str | None = None
    ttft_s: float | None = None
    total_s: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None
    sent_at_s: float = 0.0  # since the strategy's start

    @property
    def ok(self) -> bool:
        return self.error is None and self.route is not None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Prices:
    """USD per million tokens (the provider's ``price_input_per_mtok``/``price_output_per_mtok``)."""

    input_per_mtok: float
    output_per_mtok: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return prompt_tokens * self.input_per_mtok / 1e6 + completion_tokens * self.output_per_mtok / 1e6


def latency_block(results: list[RequestResult]) -> dict[str, Any]:
    """TTFT P50/P95/P99 and total-time P50/P95/P99 (seconds) of the successful requests."""
    ttft = [r.ttft_s for r in results if r.ok and r.ttft_s is not None]
    total = [r.total_s for r in results if r.ok and r.total_s is not None]
    return {
        "count": len(ttft),
        "ttft_s": {**percentiles(ttft), "mean": round(float(np.mean(ttft)), 4) if ttft else None},
        "total_s": {**percentiles(total), "mean": round(float(np.mean(total)), 4) if total else None},
    }


def _token_means(results: list[RequestResult]) -> dict[str, float | None]:
    if not results:
        return {"prompt_mean": None, "completion_mean": None}
    return {"prompt_mean": round(float(np.mean([r.prompt_tokens for r in results])), 1),
            "completion_mean": round(float(np.mean([r.completion_tokens for r in results])), 1)}


def summarize(results: list[RequestResult], prices: Prices, wall_s: float,
              cloud_counters: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every figure the issue asks for, for one strategy."""
    ok = [r for r in results if r.ok]
    errors = [r for r in results if not r.ok]
    routes = Counter(r.route for r in ok)
    cloud = [r for r in ok if r.route == "cloud"]
    prompt = sum(r.prompt_tokens for r in cloud)
    completion = sum(r.completion_tokens for r in cloud)
    complex_all = [r for r in results if r.label == "complex"]
    complex_edge = [r for r in complex_all if r.ok and r.route == "edge"]
    strict_all = [r for r in results if r.dataset_label == "complex"]
    strict_edge = [r for r in strict_all if r.ok and r.route == "edge"]
    reasons = Counter(r.reason or "?" for r in ok)
    return {
        "requests": len(results),
        "ok": len(ok),
        "errors": len(errors),
        "error_codes": dict(Counter(r.error or "?" for r in errors).most_common()),
        "routes": {route: routes.get(route, 0) for route in ROUTES},
        "reasons": dict(reasons.most_common(12)),
        "overall": latency_block(results),
        "per_route": {route: latency_block([r for r in ok if r.route == route]) for route in ROUTES},
        "per_route_tokens": {route: _token_means([r for r in ok if r.route == route]) for route in ROUTES},
        "cloud_tokens": {"prompt": prompt, "completion": completion, "total": prompt + completion},
        # Which requests the cloud tokens were spent on: in all-cloud, the "simple" share is the most any
        # routing + caching could ever save (complex and multi-turn requests must stay in the cloud).
        "cloud_tokens_by_label": {
            label: sum(r.prompt_tokens + r.completion_tokens for r in cloud if r.label == label)
            for label in ("simple", "complex")},
        "cloud_cost_usd": round(prices.cost(prompt, completion), 8),
        "cloud_cost_usd_per_1k_requests": round(
            1000 * prices.cost(prompt, completion) / max(1, len(results)), 8),
        "cloud_counters": cloud_counters or {},
        "complex": {
            "requests": len(complex_all),
            "to_edge": len(complex_edge),
            "to_edge_share": round(len(complex_edge) / len(complex_all), 4) if complex_all else None,
            "strict_requests": len(strict_all),
            "strict_to_edge": len(strict_edge),
            "strict_to_edge_share": round(len(strict_edge) / len(strict_all), 4) if strict_all else None,
        },
        "simple": simple_block(results),
        "by_kind": {kind: {"requests": n, "routes": dict(Counter(r.route or "error" for r in results
                                                                  if r.kind == kind))}
                    for kind, n in sorted(Counter(r.kind for r in results).items())},
        "wall_s": round(wall_s, 2),
        "requests_per_s": round(len(results) / wall_s, 3) if wall_s > 0 else None,
    }


def p99_floor_s(cloud_share: float, ttft_p50_s: float, ttft_p99_s: float, peak: bool = False) -> float:
    """The lowest overall TTFT P99 that any routing or caching can reach when ``cloud_share`` of the
    requests must be answered by the cloud (complex and multi-turn ones): even if every other answer
    took no time at all, 1% of all requests is ``0.01 / cloud_share`` of the cloud-bound ones, so the
    overall P99 is the cloud's own quantile at ``1 - 0.01 / cloud_share``. The cloud is the fake's
    latency model (lognormal through the configured P50 and P99; 1.5x the spread at peak)."""
    if cloud_share <= 0.01:
        return 0.0
    mu, sigma = ttft_lognormal(ttft_p50_s, ttft_p99_s, peak)
    return math.exp(mu + sigma * NormalDist().inv_cdf(1.0 - 0.01 / cloud_share))


REPEAT_KINDS = frozenset({"faq", "repeat"})


def simple_cause(result: RequestResult) -> str | None:
    """Why a ``simple`` request reached the cloud, or None if it stayed on the device.

    One cause per request, the first that applies: an FAQ question or a repeat the cache should have
    answered (``cache-miss-on-repeat``); the router's live-state diversion because the edge's
    expected wait was over budget (``edge-queueing``); otherwise the router judged it complex or not
    confidently simple (``router``)."""
    if not result.ok or result.label != "simple" or result.route != "cloud":
        return None
    if result.kind in REPEAT_KINDS and result.cache != "bypass":  # a strategy without the cache misses nothing
        return "cache-miss-on-repeat"
    if (result.reason or "").startswith("edge-busy"):
        return "edge-queueing"
    return "router"


def simple_block(results: list[RequestResult]) -> dict[str, Any]:
    """Where the ``simple`` requests went: the share that left the device and why, and the repeats.

    The share that left the device is the router's and the cache's joint figure of merit: every one
    of these could have been answered on the kiosk's own hardware."""
    simple = [r for r in results if r.label == "simple" and r.ok]
    routes = Counter(r.route for r in simple)
    causes = Counter(c for c in (simple_cause(r) for r in simple) if c)
    tokens: Counter[str] = Counter()
    for r in simple:
        cause = simple_cause(r)
        if cause:
            tokens[cause] += r.prompt_tokens + r.completion_tokens
    repeats = [r for r in results if r.kind in REPEAT_KINDS and r.ok and r.cache != "bypass"]
    return {
        "requests": len(simple),
        "routes": {route: routes.get(route, 0) for route in ROUTES},
        "to_cloud": routes.get("cloud", 0),
        "left_device_share": round(routes.get("cloud", 0) / len(simple), 4) if simple else None,
        "to_cloud_by_cause": {c: causes.get(c, 0) for c in SIMPLE_CAUSES},
        "to_cloud_tokens_by_cause": {c: tokens.get(c, 0) for c in SIMPLE_CAUSES},
        "to_cloud_reasons": dict(Counter(r.reason or "?" for r in simple if r.route == "cloud").most_common(8)),
        "repeats": {"requests": len(repeats), "cache_hits": sum(r.route == "cache" for r in repeats),
                    "misses": sum(r.route != "cache" for r in repeats)},
    }


SIMPLE_CAUSES = ("router", "edge-queueing", "cache-miss-on-repeat")
