"""The kiosk benchmark's PNG and console table, drawn from the report dict alone.

Kept apart from the driver so a report JSON from an earlier run can be re-plotted, and so the
driver never imports matplotlib (slow to import, and only needed once at the end). Agg backend:
the benchmark runs headless on kiosks and in CI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _fmt(value: Any, scale: float = 1.0, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value * scale:.{digits}f}"


def table_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the figures table (the same in the PNG and on the console)."""
    header = ["strategy", "req", "err", "edge", "cloud", "cache", "TTFT p50", "p95", "p99",
              "total p50", "p99", "p50 edge/cloud/cache", "cloud tok", "cost $/1k req", "complex->edge"]
    rows = []
    for name, s in report["strategies"].items():
        ttft, total = s["overall"]["ttft_s"], s["overall"]["total_s"]
        cx = s["complex"]
        rows.append([
            name, str(s["requests"]), str(s["errors"]), str(s["routes"]["edge"]), str(s["routes"]["cloud"]),
            str(s["routes"]["cache"]), _fmt(ttft["p50"]), _fmt(ttft["p95"]), _fmt(ttft["p99"]),
            _fmt(total["p50"]), _fmt(total["p99"]),
            "/".join(_fmt(s["per_route"][r]["ttft_s"]["p50"]) for r in ("edge", "cloud", "cache")),
            str(s["cloud_tokens"]["total"]),
            _fmt(s["cloud_cost_usd_per_1k_requests"], 1.0, 4),
            f"{cx['to_edge']}/{cx['requests']}",
        ])
    return header, rows


def format_table(report: dict[str, Any]) -> str:
    header, rows = table_rows(report)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


TARGET_NAMES = ("ttft_p50_cut", "ttft_p99_cut", "cloud_tokens_cut", "complex_to_edge_share", "errors")


def target_line(name: str, t: dict[str, Any]) -> str:
    """One target: the measured value, what it is held to, the verdict."""
    verdict = "MET" if t["met"] else "NOT MET"
    if name == "errors":
        return f"  {'errors':22s} {t['value']:>6d}   (target 0)  {verdict}"
    if "target_share_of_best" in t:
        best = t.get("best_possible")
        share = t.get("share_of_best")
        if best is not None and best <= 0:
            held = (f"best possible {_fmt(best, 100, 1)}%: nothing to save on this traffic, "
                    "met if the cut reaches it")
        else:
            held = (f"best possible {_fmt(best, 100, 1)}%, reached {_fmt(share, 100, 0)}% of it; "
                    f"target >= {t['target_share_of_best'] * 100:.0f}% of the best")
        return f"  {name:22s} {_fmt(t['value'], 100, 1):>6s}%  ({held})  {verdict}"
    cmp = "<=" if name == "complex_to_edge_share" else ">="
    return f"  {name:22s} {_fmt(t['value'], 100, 1):>6s}%  (target {cmp} {t['target'] * 100:.0f}%)  {verdict}"


def format_targets(report: dict[str, Any]) -> str:
    targets = report.get("targets") or {}
    if not targets.get("evaluated"):
        return f"targets: not evaluated ({targets.get('why', 'n/a')})"
    lines = []
    for name in TARGET_NAMES:
        if name not in targets:
            continue
        lines.append(target_line(name, targets[name]))
        lines += [f"      from: {cause}" for cause in targets[name].get("causes", [])]
    if targets.get("note"):
        lines.append(f"  note: {targets['note']}")
    return "targets (hybrid vs all-cloud):\n" + "\n".join(lines)


def format_simple(report: dict[str, Any]) -> str:
    """The share of simple requests that left the device, per strategy that routes."""
    lines = []
    for name, s in report["strategies"].items():
        block = s.get("simple")
        if not block or name in ("all-cloud", "all-edge") or not block["requests"]:
            continue
        causes = ", ".join(f"{c} {n}" for c, n in block["to_cloud_by_cause"].items() if n) or "none"
        lines.append(f"  {name:9s} {block['to_cloud']} of {block['requests']} simple requests left the device "
                     f"({_fmt(block['left_device_share'], 100, 1)}%): {causes}")
    return "simple requests sent to the cloud:\n" + "\n".join(lines) if lines else ""


def format_capacity(report: dict[str, Any]) -> str:
    cap = report.get("capacity") or {}
    if not cap.get("measured"):
        return ""
    lines = [f"capacity ({cap['criterion']}): "
             + (f"at least {cap['kiosks']} kiosks (every level passed)" if cap["at_least"]
                else f"{cap['kiosks']} kiosks (fails at {cap['first_failing_level']})")]
    for level in cap["levels"]:
        lines.append(f"  {level['kiosks']:3d} kiosks: edge TTFT P95 {_fmt(level['edge_ttft_p95_s'])} s "
                     f"({level['edge_answers']} edge answers), simple requests sent away "
                     f"{_fmt(level['simple_left_device_share'], 100, 1)}% ({level['edge_busy_diversions']} edge-busy), "
                     f"errors {level['errors']}, load {level.get('loadavg_1m')} -> "
                     + ("pass" if level["passes"] else f"FAIL ({level.get('why_not')})"))
    est = cap.get("orin_nx_7b_estimate") or {}
    if est.get("available"):
        cases = ", ".join(f"{_kiosks(c['kiosks'])} at {c['decode_tokens_per_s']:.0f} tok/s decode and "
                          f"{c['prefill_tokens_per_s']:.0f} tok/s prefill ({c['answer_s']:.1f} s per answer)"
                          for c in est["cases"].values())
        here = est["rule_on_this_machine"]
        lines.append(f"  ESTIMATE, not measured: {est['model']}: {cases}; the same rule on this machine "
                     f"says {_kiosks(here['kiosks'])} (measured {here['measured_kiosks']})")
    return "\n".join(lines)


def _kiosks(n: int) -> str:
    return "no limit from waiting" if n >= 10**6 else f"{n} kiosk(s)"


def format_report(report: dict[str, Any]) -> str:
    """Everything the console gets: per shape its table, the simple requests sent away and the targets;
    then the capacity."""
    parts = []
    for key, shape in (report.get("shapes") or {"": report}).items():
        view = {"strategies": shape["strategies"], "targets": shape.get("targets")}
        parts.append(f"== {shape.get('kiosks', key)} kiosk(s) on one device")
        parts.append(format_table(view))
        simple = format_simple(view)
        if simple:
            parts.append(simple)
        parts.append(format_targets(view))
    capacity = format_capacity(report)
    if capacity:
        parts.append(capacity)
    return "\n".join(parts)


def write_png(report: dict[str, Any], ttft_samples: dict[str, list[float]], path: Path) -> Path:
    """TTFT CDF per strategy, cloud cost per strategy, and the figures table, in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig = plt.figure(figsize=(15, 10), dpi=100)
    grid = fig.add_gridspec(2, 2, height_ratios=[3, 2])
    ax_cdf = fig.add_subplot(grid[0, 0])
    for name, samples in ttft_samples.items():
        if not samples:
            continue
        xs = np.sort(np.asarray(samples))
        ys = np.arange(1, len(xs) + 1) / len(xs)
        ax_cdf.step(xs, ys, where="post", label=f"{name} (n={len(xs)})")
    ax_cdf.set_xscale("log")
    ax_cdf.set_xlabel("time to first token (s, log scale)")
    ax_cdf.set_ylabel("share of requests")
    ax_cdf.set_title("TTFT distribution per strategy (CDF)")
    ax_cdf.grid(True, which="both", alpha=0.3)
    ax_cdf.legend(loc="lower right")

    ax_cost = fig.add_subplot(grid[0, 1])
    names = list(report["strategies"])
    costs = [report["strategies"][n]["cloud_cost_usd_per_1k_requests"] for n in names]
    bars = ax_cost.bar(names, costs, color=["#c44e52", "#55a868", "#8172b2", "#4c72b0"][: len(names)])
    for bar, cost, name in zip(bars, costs, names, strict=True):
        tokens = report["strategies"][name]["cloud_tokens"]["total"]
        ax_cost.annotate(f"${cost:.4f}\n{tokens} tok", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                         ha="center", va="bottom", fontsize=9)
    ax_cost.set_ylim(0, max([*costs, 1e-9]) * 1.25)
    ax_cost.set_ylabel("cloud cost, USD per 1,000 requests")
    ax_cost.set_title("Cloud cost per strategy (tokens x provider prices)")

    ax_table = fig.add_subplot(grid[1, :])
    ax_table.axis("off")
    header, rows = table_rows(report)
    table = ax_table.table(cellText=rows, colLabels=header, loc="center", cellLoc="right")
    table.auto_set_font_size(False)
    table.set_fontsize(9)
    table.auto_set_column_width(col=list(range(len(header))))
    table.scale(1, 1.6)
    machine = report.get("machine", {})
    fig.suptitle(f"edgecloud kiosk benchmark - {report.get('headline_kiosks', '?')} kiosks, "
                 f"{report['traffic']['requests']} requests per strategy, {machine.get('nproc')} CPUs "
                 f"({machine.get('cpu_model', '?')}), wall {report.get('duration_s', 0):.0f} s", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
