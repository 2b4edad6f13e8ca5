"""How many kiosks one device serves: the largest count whose edge-routed answers keep TTFT P95 under 1 s.

Measured on this machine with the hybrid strategy (the product as deployed) at a ladder of kiosk
counts, each level with its own traffic sized for ``capacity_duration_s``; the ladder stops at the
first level that fails. Levels already run as a shape are not run again. The router sheds load
(``edge-busy`` sends simple requests to the cloud when the edge's expected wait is over budget), so
each level also reports how many simple requests left the device: a count can pass on P95 only
because the router sent work away, and the table shows it.

For a 7B model on a Jetson Orin NX no hardware is here, so :func:`orin_nx_estimate` gives an
**estimate** from a queueing rule applied to the run's own edge demand, with the per-token speeds
from ``jetson/README.md`` (themselves estimates); the same rule applied to this machine's measured
speeds is reported next to the measured capacity, as a check of the rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

# jetson/README.md: Qwen2.5-7B-Instruct Q4_K_M on an Orin NX 16 GB, estimated (no hardware here).
ORIN_NX_7B = {"decode_tokens_per_s": (12.0, 15.0), "prefill_tokens_per_s": (100.0, 300.0)}


def level_figures(hybrid: dict[str, Any], kiosks: int, p95_bound_s: float) -> dict[str, Any]:
    """What one level shows: the edge's TTFT P95, its sample size, errors, and the load sent away."""
    edge = hybrid["per_route"]["edge"]
    p95 = edge["ttft_s"]["p95"]
    simple = hybrid.get("simple") or {}
    passes = bool(edge["count"]) and p95 is not None and p95 < p95_bound_s and hybrid["errors"] == 0
    why = None if passes else ("no edge answers: the router kept nothing on the device" if not edge["count"]
                               else "errors" if hybrid["errors"] else f"edge TTFT P95 >= {p95_bound_s} s")
    return {
        "kiosks": kiosks, "requests": hybrid["requests"], "edge_answers": edge["count"],
        "edge_ttft_p50_s": edge["ttft_s"]["p50"], "edge_ttft_p95_s": p95, "errors": hybrid["errors"],
        "simple_left_device_share": simple.get("left_device_share"),
        "edge_busy_diversions": (simple.get("to_cloud_by_cause") or {}).get("edge-queueing", 0),
        "requests_per_s": hybrid.get("requests_per_s"), "wall_s": hybrid.get("wall_s"),
        "loadavg_1m": hybrid.get("loadavg_1m"), "passes": passes, "why_not": why,
    }


def measure_capacity(options: Any, measured: dict[int, dict[str, Any]],
                     run_level: Callable[[int], dict[str, Any]], log: Any = print) -> dict[str, Any]:
    """Walk ``options.capacity_levels`` upwards until a level fails; reuse ``measured`` hybrid figures."""
    bound = options.capacity_p95_s
    levels: list[dict[str, Any]] = []
    capacity = 0
    failed_at: int | None = None
    for kiosks in sorted(set(options.capacity_levels)):
        hybrid = measured.get(kiosks)
        if hybrid is None:
            hybrid = run_level(kiosks)
        figures = level_figures(hybrid, kiosks, bound)
        figures["reused_from_shape"] = kiosks in measured
        levels.append(figures)
        log(f"capacity: {kiosks} kiosks, edge TTFT P95 {figures['edge_ttft_p95_s']} s over "
            f"{figures['edge_answers']} edge answers -> {'pass' if figures['passes'] else 'fail'}")
        if not figures["passes"]:
            failed_at = kiosks
            break
        capacity = kiosks
    return {
        "measured": True, "criterion": f"edge-routed TTFT P95 < {bound} s, no errors (hybrid strategy)",
        "p95_bound_s": bound, "kiosks": capacity, "first_failing_level": failed_at,
        "at_least": failed_at is None, "levels": levels,
    }


def max_kiosks(edge_rate_per_kiosk: float, service_s: float, first_token_s: float, bound_s: float = 1.0,
               tail: float = 0.05) -> int:
    """The largest kiosk count for which a queueing rule keeps P(TTFT > ``bound_s``) under ``tail``.

    One generation at a time: a kiosk's edge request waits when it arrives while one of the other
    kiosks' answers is being generated, which happens with probability ``(N - 1) x rate x service``
    (arrivals see time averages); the wait is then the rest of that answer, uniform on
    ``(0, service)``. So P(TTFT > bound) ~= ``(N - 1) rate service x max(0, 1 - slack / service)``
    with ``slack = bound - first_token_s``. One kiosk never waits behind itself."""
    if first_token_s >= bound_s:
        return 0
    slack = bound_s - first_token_s
    p_long = max(0.0, 1.0 - slack / service_s) if service_s > 0 else 0.0
    per_other = edge_rate_per_kiosk * service_s * p_long
    if per_other <= 0:
        return 10**6
    return 1 + math.floor(tail / per_other)


def orin_nx_estimate(capacity: dict[str, Any], shapes: dict[str, dict[str, Any]], options: Any,
                     ) -> dict[str, Any]:
    """An ESTIMATE of the capacity of a 7B on an Orin NX, from this run's edge demand per kiosk."""
    headline = shapes[str(max(int(k) for k in shapes))]
    hybrid = headline["strategies"].get("hybrid")
    single = shapes.get("1", {}).get("strategies", {}).get("all-edge")
    if hybrid is None or single is None or not hybrid.get("wall_s") or not single["per_route"]["edge"]["count"]:
        return {"estimate": True, "available": False,
                "why": "needs the hybrid at the largest shape and all-edge with one kiosk"}
    kiosks = int(headline["kiosks"])
    # The edge's demand per kiosk: every simple request the cache did not answer (the router may have sent
    # some of them away because this machine's edge was busy; a faster edge would have kept them).
    simple = hybrid.get("simple") or {}
    demand = (simple.get("routes") or {}).get("edge", 0) + (simple.get("routes") or {}).get("cloud", 0)
    rate = demand / (kiosks * hybrid["wall_s"])  # edge answers per kiosk per second
    tokens = single.get("per_route_tokens", {}).get("edge") or {}
    prompt, completion = tokens.get("prompt_mean") or 0.0, tokens.get("completion_mean") or 0.0
    here_service = single["per_route"]["edge"]["total_s"]["p50"] or 0.0
    here_first = single["per_route"]["edge"]["ttft_s"]["p50"] or 0.0
    bound = options.capacity_p95_s
    cases = {}
    for name, decode, prefill in (("slow", *(ORIN_NX_7B["decode_tokens_per_s"][0],
                                              ORIN_NX_7B["prefill_tokens_per_s"][0])),
                                  ("fast", *(ORIN_NX_7B["decode_tokens_per_s"][1],
                                             ORIN_NX_7B["prefill_tokens_per_s"][1]))):
        first = prompt / prefill
        service = first + completion / decode
        cases[name] = {"decode_tokens_per_s": decode, "prefill_tokens_per_s": prefill,
                       "first_token_s": round(first, 3), "answer_s": round(service, 3),
                       "kiosks": max_kiosks(rate, service, first, bound)}
    return {
        "estimate": True, "available": True,
        "model": "Qwen2.5-7B-Instruct Q4_K_M on a Jetson Orin NX 16 GB (speeds: jetson/README.md, estimated)",
        "rule": "bench.kiosk_capacity.max_kiosks: one generation at a time, P(TTFT > bound) < 5%",
        "edge_answers_per_kiosk_per_s": round(rate, 4), "mean_prompt_tokens": round(prompt, 1),
        "mean_completion_tokens": round(completion, 1), "cases": cases,
        "rule_on_this_machine": {"answer_s": here_service, "first_token_s": here_first,
                                 "kiosks": max_kiosks(rate, here_service, here_first, bound),
                                 "measured_kiosks": capacity.get("kiosks")},
    }
