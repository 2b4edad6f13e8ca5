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
        "by_kind": {kind: {"requests": n, "routes": dict(Counter(r.route or "error" for r in results
                                                                  if r.kind == kind))}
                    for kind, n in sorted(Counter(r.kind for r in results).items())},
        "wall_s": round(wall_s, 2),
        "requests_per_s": round(len(results) / wall_s, 3) if wall_s > 0 else None,
    }


def _cut(base: float | None, new: float | None) -> float | None:
    if base is None or new is None or base <= 0:
        return None
    return round(1.0 - new / base, 4)


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


def evaluate_targets(strategies: dict[str, dict[str, Any]], cloud_latency: dict[str, Any] | None = None,
                     ) -> dict[str, Any]:
    """The issue's targets, hybrid against all-cloud; each with its measured value and verdict.

    ``best_possible`` says what no router can beat on this traffic: for tokens, the share of all-cloud's
    tokens spent on simple requests; for the P99 (given ``cloud_latency``: ``ttft_p50_s``,
    ``ttft_p99_s``, ``peak``), the cut that :func:`p99_floor_s` allows with the complex share."""
    hybrid, cloud = strategies.get("hybrid"), strategies.get("all-cloud")
    if hybrid is None or cloud is None:
        return {"evaluated": False, "why": "needs both the hybrid and the all-cloud strategy"}
    median_cut = _cut(cloud["overall"]["ttft_s"]["p50"], hybrid["overall"]["ttft_s"]["p50"])
    p99_cut = _cut(cloud["overall"]["ttft_s"]["p99"], hybrid["overall"]["ttft_s"]["p99"])
    tokens_cut = _cut(float(cloud["cloud_tokens"]["total"]), float(hybrid["cloud_tokens"]["total"]))
    complex_share = hybrid["complex"]["to_edge_share"]
    by_label = cloud.get("cloud_tokens_by_label", {})
    base_tokens = float(cloud["cloud_tokens"]["total"])
    best_cut = round(by_label.get("simple", 0) / base_tokens, 4) if base_tokens > 0 else None
    best_p99_cut = None
    complex_n, total_n = hybrid["complex"]["requests"], hybrid["requests"]
    if cloud_latency is not None and total_n and cloud["overall"]["ttft_s"]["p99"]:
        floor = p99_floor_s(complex_n / total_n, cloud_latency["ttft_p50_s"], cloud_latency["ttft_p99_s"],
                            bool(cloud_latency.get("peak")))
        best_p99_cut = round(1.0 - floor / cloud["overall"]["ttft_s"]["p99"], 4)

    def at_least(value: float | None, target: float) -> dict[str, Any]:
        return {"value": value, "target": target, "met": value is not None and value >= target}

    checks = {
        "ttft_p50_cut": at_least(median_cut, 0.80),
        "ttft_p99_cut": {**at_least(p99_cut, 0.60), "best_possible": best_p99_cut},
        "cloud_tokens_cut": {**at_least(tokens_cut, 0.60), "best_possible": best_cut},
        "complex_to_edge_share": {"value": complex_share, "target": 0.02,
                                  "met": complex_share is not None and complex_share <= 0.02,
                                  "strict_value": hybrid["complex"]["strict_to_edge_share"]},
    }
    return {"evaluated": True, "all_met": all(c["met"] for c in checks.values()), **checks}
