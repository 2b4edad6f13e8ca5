"""``--baseline kiosk.json``: every figure of this run beside an earlier run's, in one table.

So a change to the router, the edge or the cache shows its effect at a glance: the same command at two
commits (or with two intent models) gives two reports, and this prints them side by side per shape.
Reports of the first schema (one shape, no ``shapes`` key) are read as a single shape.

Also a command of its own, to compare two saved reports without running anything:
``python -m bench.kiosk_baseline OLD.json NEW.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.kiosk_report import TARGET_NAMES


def load_report(path: Path) -> dict[str, Any]:
    """A kiosk report, with ``shapes`` filled in for a first-schema report."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"cannot read the baseline report {path}: {exc}") from exc
    if report.get("benchmark") != "kiosk" or "strategies" not in report:
        raise SystemExit(f"{path} is not a kiosk benchmark report (kiosk.json)")
    if "shapes" not in report:
        kiosks = int(report.get("config", {}).get("concurrency", 0))
        report["shapes"] = {str(kiosks): {"kiosks": kiosks, "traffic": report.get("traffic", {}),
                                          "strategies": report["strategies"], "targets": report.get("targets", {})}}
    return report


def _num(value: Any, unit: str = "", digits: int = 2, scale: float = 1.0) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) and scale == 1.0 and unit == "":
        return str(value)
    return f"{value * scale:.{digits}f}{unit}"


def _change(old: Any, new: Any, unit: str = "", scale: float = 1.0, digits: int = 2,
            relative: bool = True) -> str:
    if not isinstance(old, (int, float)) or not isinstance(new, (int, float)):
        return ""
    diff = (new - old) * scale
    text = f"{diff:+.{digits}f}{unit}" if not (isinstance(old, int) and isinstance(new, int) and scale == 1.0
                                                and unit == "") else f"{int(diff):+d}"
    if relative and old:
        text += f" ({(new - old) / abs(old) * 100:+.0f}%)"
    return text


def _strategy_rows(name: str, old: dict[str, Any], new: dict[str, Any]) -> list[list[str]]:
    rows = []
    for q in ("p50", "p95", "p99"):
        a, b = old["overall"]["ttft_s"][q], new["overall"]["ttft_s"][q]
        rows.append([f"{name} TTFT {q.upper()}", _num(a, " s"), _num(b, " s"), _change(a, b, " s")])
    a, b = old["per_route"]["edge"]["ttft_s"]["p95"], new["per_route"]["edge"]["ttft_s"]["p95"]
    if a is not None or b is not None:
        rows.append([f"{name} edge TTFT P95", _num(a, " s"), _num(b, " s"), _change(a, b, " s")])
    routes_a = "/".join(str(old["routes"][r]) for r in ("edge", "cloud", "cache"))
    routes_b = "/".join(str(new["routes"][r]) for r in ("edge", "cloud", "cache"))
    rows.append([f"{name} edge/cloud/cache", routes_a, routes_b, ""])
    a, b = old["cloud_tokens"]["total"], new["cloud_tokens"]["total"]
    rows.append([f"{name} cloud tokens", str(a), str(b), _change(a, b)])
    sa, sb = old.get("simple") or {}, new.get("simple") or {}
    if name not in ("all-cloud", "all-edge"):
        rows.append([f"{name} simple requests sent to the cloud",
                     _simple(old), _simple(new),
                     _change(sa.get("left_device_share"), sb.get("left_device_share"), " pt", 100, 1, False)])
    ca, cb = old["complex"], new["complex"]
    rows.append([f"{name} complex -> edge", f"{ca['to_edge']}/{ca['requests']}", f"{cb['to_edge']}/{cb['requests']}",
                 ""])
    rows.append([f"{name} errors", str(old["errors"]), str(new["errors"]), _change(old["errors"], new["errors"],
                                                                                     relative=False)])
    return rows


def _simple(figures: dict[str, Any]) -> str:
    block = figures.get("simple")
    if block:
        return f"{block['to_cloud']}/{block['requests']} ({_num(block['left_device_share'], '%', 1, 100)})"
    # First-schema reports: no simple block; the cloud requests labelled simple are not recorded.
    return "-"


def _target_rows(old: dict[str, Any], new: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name in TARGET_NAMES:
        a, b = old.get(name), new.get(name)
        if not b:
            continue
        verdict = lambda t: "" if not t else (" MET" if t.get("met") else " NOT MET")  # noqa: E731
        if name == "errors":
            rows.append([f"target {name}", _num((a or {}).get("value")) + verdict(a),
                         _num(b.get("value")) + verdict(b), ""])
            continue
        av, bv = (a or {}).get("value"), b.get("value")
        rows.append([f"target {name}", _num(av, "%", 1, 100) + verdict(a), _num(bv, "%", 1, 100) + verdict(b),
                     _change(av, bv, " pt", 100, 1, False)])
        if "share_of_best" in b:
            sa = (a or {}).get("share_of_best")
            sb = b["share_of_best"]
            rows.append([f"  {name} share of best possible", _num(sa, "%", 0, 100), _num(sb, "%", 0, 100),
                         _change(sa, sb, " pt", 100, 0, False)])
    return rows


def comparison_rows(base: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, list[list[str]]]]:
    """(section title, rows of [figure, baseline, this run, change]) per shape both reports have."""
    sections = []
    for key, shape in new["shapes"].items():
        old_shape = base["shapes"].get(key)
        if old_shape is None:
            continue
        rows: list[list[str]] = []
        ta, tb = old_shape.get("traffic", {}).get("requests"), shape.get("traffic", {}).get("requests")
        rows.append(["requests per strategy", str(ta), str(tb), "" if ta == tb else "traffic differs"])
        for name, figures in shape["strategies"].items():
            if name in old_shape["strategies"]:
                rows += _strategy_rows(name, old_shape["strategies"][name], figures)
        rows += _target_rows(old_shape.get("targets") or {}, shape.get("targets") or {})
        sections.append((f"{key} kiosk(s) on one device", rows))
    cap_a, cap_b = (base.get("capacity") or {}), (new.get("capacity") or {})
    if cap_b.get("measured"):
        sections.append(("capacity", [["kiosks with edge TTFT P95 < 1 s", _capacity(cap_a), _capacity(cap_b),
                                       _change(cap_a.get("kiosks"), cap_b.get("kiosks"), relative=False)]]))
    return sections


def _capacity(cap: dict[str, Any]) -> str:
    if not cap.get("measured"):
        return "-"
    return (">= " if cap.get("at_least") else "") + str(cap.get("kiosks"))


def format_comparison(base: dict[str, Any], new: dict[str, Any], label: str = "baseline") -> str:
    """The side-by-side table, with where each report came from."""
    def origin(report: dict[str, Any]) -> str:
        gw = report.get("config", {}).get("gateway", {})
        return (f"commit {report.get('machine', {}).get('source', '?')}, {report.get('started_at', '?')}, "
                f"intent model {gw.get('intent_model_dir', '?')}")

    lines = [f"baseline {label}: {origin(base)}", f"this run: {origin(new)}"]
    header = ["figure", "baseline", "this run", "change"]
    for title, rows in comparison_rows(base, new):
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        lines.append(f"== {title}")
        lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="print two kiosk benchmark reports side by side")
    parser.add_argument("baseline", type=Path)
    parser.add_argument("report", type=Path)
    args = parser.parse_args(argv)
    print(format_comparison(load_report(args.baseline), load_report(args.report), str(args.baseline)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
