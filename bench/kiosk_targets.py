"""The kiosk benchmark's targets, hybrid against all-cloud on the same run, and what each shortfall comes from.

Two of the targets are relative to the best any routing could do on the run's own traffic, because
complex questions and follow-ups must go to the cloud whatever the router does:

* the P99 TTFT cut must reach 90% of the cut that :func:`bench.kiosk_stats.p99_floor_s` allows with
  the run's complex share;
* the cloud-token cut must reach 90% of the share of all-cloud's tokens spent on simple requests.

A missed target is explained in the three ways a hybrid falls short of the best possible: simple
requests the router sent to the cloud, edge queueing (answers slow because other generations were
ahead, or simple requests diverted as ``edge-busy``), and cache misses on FAQ questions and repeats.
"""

from __future__ import annotations

from typing import Any

from bench.kiosk_stats import SIMPLE_CAUSES, RequestResult, p99_floor_s

MEDIAN_CUT_TARGET = 0.80
SHARE_OF_BEST_TARGET = 0.90
COMPLEX_TO_EDGE_MAX = 0.02
CAUSE_WORDS = {"router": "simple requests sent to the cloud by the router",
               "edge-queueing": "simple requests diverted to the cloud because the edge was busy (edge queueing)",
               "cache-miss-on-repeat": "FAQ questions and repeats the cache missed"}


def cut(base: float | None, new: float | None) -> float | None:
    """How much lower ``new`` is than ``base``, as a share of ``base`` (None if either is unknown)."""
    if base is None or new is None or base <= 0:
        return None
    return round(1.0 - new / base, 4)


def share_of_best(value: float | None, best: float | None) -> float | None:
    """The measured cut as a share of the best possible cut (1.0: as good as any router could do).

    None when there is nothing to share: no measurement, or a best possible cut of zero or less (the
    traffic leaves nothing to save). It can exceed 1.0 when the measured run was luckier than the
    bound (the all-cloud P99 is itself a sample)."""
    if value is None or best is None or best <= 0:
        return None
    return round(value / best, 4)


def relative_target(value: float | None, best: float | None, target: float = SHARE_OF_BEST_TARGET,
                    ) -> dict[str, Any]:
    """A cut judged against ``target`` x the best possible cut.

    With nothing to save (``best`` <= 0) the target is met when the cut reaches the bound itself."""
    share = share_of_best(value, best)
    if share is not None:
        met = share >= target
    else:
        met = value is not None and best is not None and value >= best
    return {"value": value, "best_possible": best, "share_of_best": share, "target_share_of_best": target,
            "met": met}


def _median_causes(hybrid_results: list[RequestResult], threshold_s: float) -> dict[str, Any]:
    """How many answers came within ``threshold_s``, how many the median needs, and the slow ones by cause."""
    ok = [r for r in hybrid_results if r.ok and r.ttft_s is not None]
    fast = sum(r.ttft_s <= threshold_s for r in ok)  # type: ignore[operator]
    needed = len(ok) // 2 + 1
    slow_edge = sum(r.route == "edge" and r.ttft_s > threshold_s for r in ok)  # type: ignore[operator]
    slow_cache = sum(r.route == "cache" and r.ttft_s > threshold_s for r in ok)  # type: ignore[operator]
    return {"threshold_s": round(threshold_s, 4), "fast": fast, "needed": needed,
            "missing": max(0, needed - fast), "slow_edge_answers": slow_edge, "slow_cache_answers": slow_cache}


def _explain(name: str, check: dict[str, Any], hybrid: dict[str, Any]) -> list[str]:
    """Plain sentences: what a missed target comes from, largest cause first."""
    simple = hybrid.get("simple") or {}
    by_cause = simple.get("to_cloud_by_cause") or {}
    tokens_by_cause = simple.get("to_cloud_tokens_by_cause") or {}
    lines: list[str] = []
    if name == "errors":
        return [f"errors: {hybrid.get('error_codes') or {}}"]
    if name == "complex_to_edge_share":
        return [f"complex requests answered on the edge: {hybrid['complex']['to_edge']} of "
                f"{hybrid['complex']['requests']}"]
    ranked = sorted(SIMPLE_CAUSES, key=lambda c: -by_cause.get(c, 0))
    for cause in ranked:
        n = by_cause.get(cause, 0)
        if not n:
            continue
        extra = f", {tokens_by_cause.get(cause, 0)} cloud tokens" if name == "cloud_tokens_cut" else ""
        lines.append(f"{CAUSE_WORDS[cause]}: {n}{extra}")
    detail = check.get("detail") or {}
    if name == "ttft_p50_cut" and detail.get("slow_edge_answers"):
        lines.append(f"edge queueing: {detail['slow_edge_answers']} edge answers slower than "
                     f"{detail['threshold_s']:.2f} s (the median needs {detail['needed']} answers that fast, "
                     f"{detail['fast']} were)")
    if name == "ttft_p99_cut" and detail.get("slow_edge_answers"):
        lines.append(f"edge queueing: {detail['slow_edge_answers']} edge answers slower than the "
                     f"{detail['floor_s']:.2f} s floor")
    if name == "ttft_p99_cut" and detail.get("floor_with_hybrid_cloud_share_s") is not None:
        lines.append(f"the hybrid's cloud share {detail['hybrid_cloud_share'] * 100:.0f}% (complex "
                     f"{detail['complex_share'] * 100:.0f}%) raises the floor from {detail['floor_s']:.2f} s "
                     f"to {detail['floor_with_hybrid_cloud_share_s']:.2f} s")
    if not lines:
        lines.append("no simple request left the device: the gap is the run's noise "
                     "(the all-cloud and hybrid samples are different draws of the cloud's latency)")
    return lines


def evaluate_targets(strategies: dict[str, dict[str, Any]], cloud_latency: dict[str, Any] | None = None,
                     hybrid_results: list[RequestResult] | None = None) -> dict[str, Any]:
    """Each target with its measured value, the best possible on this traffic, its verdict and causes.

    ``cloud_latency`` (``ttft_p50_s``, ``ttft_p99_s``, ``peak``) is the fake cloud's latency model, for
    the P99 floor; ``hybrid_results`` (the hybrid's per-request rows) lets the median's shortfall be
    counted in answers."""
    hybrid, cloud = strategies.get("hybrid"), strategies.get("all-cloud")
    if hybrid is None or cloud is None:
        return {"evaluated": False, "why": "needs both the hybrid and the all-cloud strategy"}
    cloud_ttft, hybrid_ttft = cloud["overall"]["ttft_s"], hybrid["overall"]["ttft_s"]
    median_cut = cut(cloud_ttft["p50"], hybrid_ttft["p50"])
    p99_cut = cut(cloud_ttft["p99"], hybrid_ttft["p99"])
    base_tokens = float(cloud["cloud_tokens"]["total"])
    tokens_cut = cut(base_tokens, float(hybrid["cloud_tokens"]["total"]))
    best_tokens = (round(cloud.get("cloud_tokens_by_label", {}).get("simple", 0) / base_tokens, 4)
                   if base_tokens > 0 else None)

    median = {"value": median_cut, "target": MEDIAN_CUT_TARGET,
              "met": median_cut is not None and median_cut >= MEDIAN_CUT_TARGET}
    if hybrid_results is not None and cloud_ttft["p50"]:
        median["detail"] = _median_causes(hybrid_results, (1 - MEDIAN_CUT_TARGET) * cloud_ttft["p50"])

    p99 = relative_target(p99_cut, None)
    total_n, complex_n = hybrid["requests"], hybrid["complex"]["requests"]
    if cloud_latency is not None and total_n and cloud_ttft["p99"]:
        args = (cloud_latency["ttft_p50_s"], cloud_latency["ttft_p99_s"], bool(cloud_latency.get("peak")))
        floor = p99_floor_s(complex_n / total_n, *args)
        p99 = relative_target(p99_cut, round(1.0 - floor / cloud_ttft["p99"], 4))
        cloud_share = hybrid["routes"]["cloud"] / total_n
        edge_rows = [r for r in hybrid_results or [] if r.ok and r.route == "edge" and r.ttft_s is not None]
        p99["detail"] = {
            "floor_s": round(floor, 4), "complex_share": round(complex_n / total_n, 4),
            "hybrid_cloud_share": round(cloud_share, 4),
            "floor_with_hybrid_cloud_share_s": round(p99_floor_s(cloud_share, *args), 4),
            "slow_edge_answers": sum(r.ttft_s > floor for r in edge_rows),  # type: ignore[operator]
        }
    tokens = relative_target(tokens_cut, best_tokens)
    complex_share = hybrid["complex"]["to_edge_share"]
    errors = hybrid["errors"] + cloud["errors"]
    checks: dict[str, dict[str, Any]] = {
        "ttft_p50_cut": median,
        "ttft_p99_cut": p99,
        "cloud_tokens_cut": tokens,
        "complex_to_edge_share": {"value": complex_share, "target": COMPLEX_TO_EDGE_MAX,
                                  "met": complex_share is not None and complex_share <= COMPLEX_TO_EDGE_MAX,
                                  "strict_value": hybrid["complex"]["strict_to_edge_share"]},
        "errors": {"value": errors, "target": 0, "met": errors == 0,
                   "by_strategy": {"hybrid": hybrid["errors"], "all-cloud": cloud["errors"]}},
    }
    for name, check in checks.items():
        if not check["met"]:
            check["causes"] = _explain(name, check, hybrid)
    return {"evaluated": True, "all_met": all(c["met"] for c in checks.values()), **checks}
