"""``edgecloud sla report`` and ``edgecloud report``: the evidence and the money, from the store.

Both read the per-minute rows the gateway writes under ``<data_dir>/sla`` (they work while the
gateway runs, or on a copy of the directory pulled from a kiosk), so an operator can file an SLA
credit claim or show the return on the edge hardware without access to the live process. The
SLA targets come from the same configuration the gateway uses, read at report time, so a
corrected target or a late-announced maintenance window applies to past minutes too.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from edge.config import Settings, SlaTarget, load_settings
from edge.observability.cost import REJECTED, ROUTES, cost_report, sum_usage
from edge.observability.sketch import RELATIVE_ERROR
from edge.observability.sla import MINUTE_S, MinuteRow, evaluate, iso, parse_instant, target_for
from edge.observability.store import MinuteStore

FORMATS = ("table", "csv", "json")
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, now: float | None = None) -> float:
    """``30m``, ``24h``, ``7d``, ``2w`` before now, an ISO-8601 time, or ``all``."""
    now = time.time() if now is None else now
    value = text.strip().lower()
    if value == "all":
        return 0.0
    m = _RELATIVE.match(value)
    if m:
        return now - float(m[1]) * _UNIT_S[m[2]]
    try:
        return parse_instant(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--since wants e.g. 30m, 24h, 7d, an ISO-8601 time or 'all', not {text!r}"
        ) from None


def _settings(args: argparse.Namespace) -> Settings:
    settings = load_settings(args.config) if args.config else load_settings()
    if args.data_dir:
        settings.server.data_dir = Path(args.data_dir)
    return settings


def _store(settings: Settings) -> MinuteStore:
    mc = settings.metrics
    return MinuteStore(settings.server.data_dir / "sla", mc.sla_retention_days, mc.sla_max_bytes)


# ----- SLA report -------------------------------------------------------------------------------------
def sla_report_data(
    settings: Settings,
    since: float,
    until: float | None = None,
    provider: str | None = None,
    scope: str = "all",
) -> dict[str, Any]:
    """Every stored minute in the period with its verdict, the breaches with evidence, and totals."""
    kinds = ("route", "provider") if scope == "all" else (scope,)
    if provider is not None:
        kinds = ("provider",)
    stored = _store(settings).query(since=since, until=until, kinds=kinds, name=provider)
    rows = [MinuteRow.from_dict(r.data) for r in stored]
    default = SlaTarget()
    result = evaluate(rows, settings.metrics.sla, default)
    minutes = []
    for row, verdict in result.minutes:
        target = target_for(row, settings.metrics.sla, default)
        item = row.to_dict(samples=False)
        item.update(
            start=iso(row.minute),
            end=iso(row.minute + MINUTE_S),
            verdict=verdict,
            target_ttft_p99_ms=target.ttft_p99_s * 1000.0 if target else None,
            target_availability=target.availability if target else None,
        )
        minutes.append(item)
    names = sorted({r.name for r in rows if r.scope == "provider"})
    targets = {
        n: (settings.metrics.sla.get(n) or settings.metrics.sla.get("*") or default).model_dump()
        for n in names
    }
    targets.update({k: v.model_dump() for k, v in settings.metrics.sla.items() if k.startswith("route:")})
    return {
        "period": {"since": iso(since), "until": iso(until if until is not None else time.time())},
        "quantiles": QUANTILES_NOTE,
        "targets": targets,
        "summary": list(result.summary().values()),
        "minutes": minutes,
        "breaches": [b.to_dict() for b in result.breaches],
    }


# How every latency figure in the report was computed: stated in the JSON and under the table.
QUANTILES_NOTE = {
    "method": "DDSketch, nearest rank",
    "relative_error": RELATIVE_ERROR,
    "text": (
        f"Latency percentiles are nearest-rank, from a DDSketch of every request: each is within "
        f"{RELATIVE_ERROR * 100:g}% of the exact value; minute rows and period totals merge exactly."
    ),
}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


MINUTE_COLUMNS = [
    "start",
    "end",
    "scope",
    "name",
    "verdict",
    "breach_kinds",
    "requests",
    "errors",
    "unavailable",
    "rate_limited",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "ttft_p99_ms",
    "total_p50_ms",
    "total_p95_ms",
    "total_p99_ms",
    "error_rate",
    "availability",
    "target_ttft_p99_ms",
    "target_availability",
    "example_request_ids",
]


def _examples(row: dict[str, Any]) -> list[str]:
    """Example request ids, failed ones first (they prove unavailability), without repeats."""
    return list(dict.fromkeys([*row.get("failed_ids", []), *row.get("slowest_ids", [])]))


def _minute_record(m: dict[str, Any], kinds: dict[tuple[int, str, str], list[str]]) -> dict[str, Any]:
    out = {c: m.get(c) for c in MINUTE_COLUMNS}
    out["breach_kinds"] = " ".join(kinds.get((m["minute"], m["scope"], m["name"]), []))
    out["example_request_ids"] = " ".join(_examples(m))
    return out


def render_sla(data: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2)
    kinds = {(b["minute"], b["scope"], b["name"]): b["kinds"] for b in data["breaches"]}
    records = [_minute_record(m, kinds) for m in data["minutes"]]
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=MINUTE_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)
        return buf.getvalue()
    out = [f"SLA report {data['period']['since']} .. {data['period']['until']}", ""]
    summary_rows = [
        [
            s["scope"],
            s["name"],
            str(s["minutes"]),
            str(s["excluded_minutes"]),
            str(s["breached_minutes"]),
            str(s["requests"]),
            f"{s['availability'] * 100:.3f}%",
            _ms(s.get("ttft_p50_ms")),
            _ms(s.get("ttft_p99_ms")),
        ]
        for s in data["summary"]
    ]
    out.append(
        _table(
            ["scope", "name", "minutes", "excluded", "breached", "requests", "availability", "ttft p50", "p99"],
            summary_rows,
        )
    )
    out += ["", "Minutes:"]
    out.append(
        _table(
            [
                "start",
                "scope",
                "name",
                "req",
                "err",
                "unavail",
                "ttft p50",
                "p95",
                "p99",
                "total p99",
                "avail",
                "verdict",
            ],
            [
                [
                    r["start"],
                    r["scope"],
                    r["name"],
                    str(r["requests"]),
                    str(r["errors"]),
                    str(r["unavailable"]),
                    _ms(r["ttft_p50_ms"]),
                    _ms(r["ttft_p95_ms"]),
                    _ms(r["ttft_p99_ms"]),
                    _ms(r["total_p99_ms"]),
                    f"{r['availability'] * 100:.2f}%",
                    r["verdict"] + (f" ({r['breach_kinds']})" if r["breach_kinds"] else ""),
                ]
                for r in records
            ],
        )
    )
    out += ["", QUANTILES_NOTE["text"]]
    out += ["", f"Breaches: {len(data['breaches'])}"]
    for b in data["breaches"]:
        out.append(
            f"  {b['start']} .. {b['end']}  {b['scope']} {b['name']}: {', '.join(b['kinds'])}; "
            f"{b['requests']} requests, {b['unavailable']} unavailable, "
            f"TTFT p50/p95/p99 {_ms(b['ttft_p50_ms'])}/{_ms(b['ttft_p95_ms'])}/{_ms(b['ttft_p99_ms'])} ms "
            f"(target p99 <= {_ms(b['target_ttft_p99_ms'])} ms), availability "
            f"{b['availability'] * 100:.2f}% (target >= {b['target_availability'] * 100:.2f}%); "
            f"examples: {' '.join(_examples(b)) or '-'}"
        )
    return "\n".join(out) + "\n"


# ----- cost report ------------------------------------------------------------------------------------
def cost_report_data(settings: Settings, since: float, until: float | None = None) -> dict[str, Any]:
    stored = _store(settings).query(since=since, until=until, kinds=("usage",))
    report = cost_report(sum_usage((r.name, r.data) for r in stored))
    report["period"] = {"since": iso(since), "until": iso(until if until is not None else time.time())}
    report["currency"] = "USD"
    return report


COST_COLUMNS = [
    "route",
    "requests",
    "ok",
    "errors",
    "rejected",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "avoided_usd",
]


def render_cost(data: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2)
    rows = [
        {"route": name, **{c: data["routes"][name][c] for c in COST_COLUMNS[1:]}}
        for name in (*ROUTES, REJECTED)
    ]
    rows.append({"route": "total", **{c: data["total"][c] for c in COST_COLUMNS[1:]}})
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=COST_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue()
    table = _table(
        [
            "route",
            "requests",
            "ok",
            "errors",
            "rejected",
            "prompt tok",
            "completion tok",
            "cloud cost",
            "avoided",
        ],
        [
            [
                str(r["route"]),
                str(r["requests"]),
                str(r["ok"]),
                str(r["errors"]),
                str(r["rejected"]),
                str(r["prompt_tokens"]),
                str(r["completion_tokens"]),
                f"${r['cost_usd']:.6f}",
                f"${r['avoided_usd']:.6f}",
            ]
            for r in rows
        ],
    )
    return (
        f"Usage {data['period']['since']} .. {data['period']['until']}\n\n{table}\n\n"
        f"cache hit ratio      {data['cache_hit_ratio'] * 100:.1f}% of lookups "
        f"({data['cache_share'] * 100:.1f}% of answers from the cache, {data['edge_share'] * 100:.1f}% from the edge)\n"
        f"paid to the cloud    ${data['actual_cost_usd']:.6f}\n"
        f"all-cloud would cost ${data['all_cloud_cost_usd']:.6f}\n"
        f"saved                ${data['saved_usd']:.6f} ({data['saved_ratio'] * 100:.1f}%)\n"
    )


# ----- argparse ---------------------------------------------------------------------------------------
def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--since",
        default="24h",
        type=parse_since,
        help="start: 30m, 24h, 7d, an ISO-8601 time or 'all' (default 24h)",
    )
    p.add_argument("--until", default=None, type=_instant, help="end: ISO-8601 time (default now)")
    p.add_argument("--format", choices=FORMATS, default="table")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--data-dir", default=None, help="the gateway's data directory (its sla/ is read)")
    where.add_argument("--config", default=None, help="the gateway's TOML config (targets, prices, data dir)")


def _instant(text: str) -> float:
    try:
        return parse_instant(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--until wants an ISO-8601 time, not {text!r}") from None


def _period(args: argparse.Namespace) -> tuple[float, float | None]:
    return args.since, args.until


def _run_sla(args: argparse.Namespace) -> int:
    since, until = _period(args)
    try:
        data = sla_report_data(_settings(args), since, until, provider=args.provider, scope=args.scope)
    except ValueError as exc:  # a malformed exclusion window in [metrics.sla]
        sys.stderr.write(f"edgecloud sla report: {exc}\n")
        return 2
    sys.stdout.write(render_sla(data, args.format))
    return 0


def _run_report(args: argparse.Namespace) -> int:
    since, until = _period(args)
    sys.stdout.write(render_cost(cost_report_data(_settings(args), since, until), args.format))
    return 0


def register(subparsers: Any) -> None:
    sla = subparsers.add_parser("sla", help="SLA minutes and breaches from the gateway's store")
    sla_sub = sla.add_subparsers(dest="sla_command", metavar="SUBCOMMAND")
    sla_sub.required = True
    rep = sla_sub.add_parser(
        "report",
        help="every minute held against the SLA, breaches with evidence",
        description=f"Every stored minute held against the SLA. {QUANTILES_NOTE['text']}",
    )
    _common(rep)
    rep.add_argument("--provider", default=None, help="only this cloud provider's minutes")
    rep.add_argument("--scope", choices=("all", "provider", "route"), default="all")
    rep.set_defaults(func=_run_sla)

    cost = subparsers.add_parser("report", help="requests, tokens and money by route; savings vs all-cloud")
    _common(cost)
    cost.set_defaults(func=_run_report)
