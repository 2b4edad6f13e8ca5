"""``edgecloud models eval-intent``: score a model on labelled JSONL and time it, numpy + onnxruntime only.

Latency is measured per request through the same ``IntentClassifier.classify`` the gateway calls
(feature hashing + ONNX run), one request at a time, after the warm-up that ``load`` does. Both wall-clock
and the thread's CPU time are reported: on a machine shared with other busy processes the wall-clock tail
is mostly time spent waiting for a core, which the CPU time leaves out.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from models.intent import dataset as ds
from models.intent.metrics import percentiles_ms, routing_recall, summarize
from models.intent.runtime import IntentClassifier

SPLITS = ("all", "dev", "train")


TARGETS = {"accuracy": 0.97, "complex_to_cloud": 0.99, "simple_to_cloud_max": 0.05, "language_gap_max": 0.02}


def _routed(rows: Sequence[ds.Row], p_complex: Sequence[float | None], threshold: float) -> list[str]:
    """Where the policy sends each row: multi-turn rows by rule, the rest by label and confidence."""
    out = []
    for row, p in zip(rows, p_complex, strict=True):
        if row.multi_turn or p is None:
            out.append("cloud")
        else:
            out.append("cloud" if p >= 0.5 or (1.0 - p) < threshold else "edge")
    return out


def routing_table(rows: Sequence[ds.Row], routes: Sequence[str]) -> dict:
    """Routing quality of ``routes`` ("edge"/"cloud") against the labels, with errors in each direction."""
    n_complex = sum(r.label == "complex" for r in rows)
    n_simple = len(rows) - n_complex
    simple_cloud = sum(r.label == "simple" and x == "cloud" for r, x in zip(rows, routes, strict=True))
    complex_edge = sum(r.label == "complex" and x == "edge" for r, x in zip(rows, routes, strict=True))
    return {
        "n": len(rows),
        "n_simple": n_simple,
        "n_complex": n_complex,
        "accuracy": round(1.0 - (simple_cloud + complex_edge) / len(rows), 4) if rows else None,
        "complex_to_cloud": round(1.0 - complex_edge / n_complex, 4) if n_complex else None,
        "simple_to_cloud": round(simple_cloud / n_simple, 4) if n_simple else None,
        "simple_sent_to_cloud": simple_cloud,
        "complex_kept_on_edge": complex_edge,
    }


def _grouped(rows: Sequence[ds.Row], routes: Sequence[str], attr: str) -> dict:
    out = {}
    for value in sorted({getattr(r, attr) for r in rows}):
        sel = [i for i, r in enumerate(rows) if getattr(r, attr) == value]
        out[value] = routing_table([rows[i] for i in sel], [routes[i] for i in sel])
    return out


def verdicts(table: dict, per_language: dict) -> dict:
    """Each routing target with its figure and whether it is met (English against Chinese for the gap)."""
    gap = None
    if "en" in per_language and "zh" in per_language:
        gap = round(abs(per_language["en"]["accuracy"] - per_language["zh"]["accuracy"]), 4)
    return {
        "accuracy": {"target": f">= {TARGETS['accuracy']}", "value": table["accuracy"],
                     "met": table["accuracy"] is not None and table["accuracy"] >= TARGETS["accuracy"]},
        "complex_to_cloud": {"target": f">= {TARGETS['complex_to_cloud']}", "value": table["complex_to_cloud"],
                             "met": table["complex_to_cloud"] is None
                             or table["complex_to_cloud"] >= TARGETS["complex_to_cloud"]},
        "simple_to_cloud": {"target": f"<= {TARGETS['simple_to_cloud_max']}", "value": table["simple_to_cloud"],
                            "met": table["simple_to_cloud"] is None
                            or table["simple_to_cloud"] <= TARGETS["simple_to_cloud_max"]},
        "en_zh_gap": {"target": f"<= {TARGETS['language_gap_max']}", "value": gap,
                      "met": gap is None or gap <= TARGETS["language_gap_max"]},
    }


def _route_via_gateway(rows: Sequence[ds.Row], url: str) -> tuple[list[str], list[float]]:
    """Ask a running gateway's ``POST /v1/route`` where each row goes (the whole policy, not only the model)."""
    import httpx  # only this mode needs it

    routes, latencies = [], []
    with httpx.Client(base_url=url.rstrip("/"), timeout=30.0) as client:
        for row in rows:
            if row.messages:
                messages = [{"role": role, "content": content} for role, content in row.messages]
            else:
                messages = [{"role": "user", "content": row.text}]
            start = time.perf_counter()
            resp = client.post("/v1/route", json={"model": "edgecloud-auto", "messages": messages})
            latencies.append((time.perf_counter() - start) * 1000.0)
            resp.raise_for_status()
            routes.append(str(resp.json()["route"]))
    return routes, latencies


def evaluate(
    data: Sequence[str | Path],
    model_dir: str | Path | None = None,
    split: str = "all",
    providers: list[str] | None = None,
    max_errors: int = 15,
    url: str | None = None,
    seen_data: Sequence[str | Path] = (),
    encoder: bool = True,
) -> dict:
    """Classify every row of ``data`` and return the report (see ``format_report``).

    Routing figures apply the card's confidence threshold the way the policy does, and count multi-turn
    rows as routed to the cloud by rule. With ``url``, the routes come from a running gateway's
    ``POST /v1/route`` instead (multi-turn rows sent as conversations), so the whole policy is measured.

    ``seen_data`` is what the model may have been trained on (the paths given to ``train-intent --data``,
    read the way training reads them). Single-turn rows whose text is also there are left out and counted:
    sets written by different hands share canonical questions ("What is the capital of Canada?"), and a
    model scored on text it learned from overstates itself. Conversations stay: the policy routes them by
    turn count, not the model.

    ``encoder=False`` loads the model without its encoder stage (the n-gram model alone, at its card cut).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}")
    files = ds.expand_paths(data, include_test_files=True)
    all_rows, load = ds.load_rows(files, keep_multi_turn=True)
    if split != "all":
        all_rows = [r for r in all_rows if ds.is_dev(r.text) == (split == "dev")]
    seen_files = ds.expand_paths(seen_data) if seen_data else []
    left_out_seen = 0
    if seen_files:
        seen_rows, _ = ds.load_rows(seen_files)
        seen = {ds.text_key(r.text) for r in seen_rows}
        kept = [r for r in all_rows if r.multi_turn or ds.text_key(r.text) not in seen]
        left_out_seen = len(all_rows) - len(kept)
        all_rows = kept
    rows = [r for r in all_rows if not r.multi_turn]
    if not rows:
        raise ValueError("no rows to evaluate")
    clf = IntentClassifier.load(model_dir, providers=providers, encoder=encoder)
    threshold = clf.confidence_threshold
    preds: list[str] = []
    p_complex: list[float] = []
    latencies: list[float] = []
    cpu_ms: list[float] = []
    stages: list[str] = []
    for row in rows:
        cpu_start = time.thread_time()
        result = clf.classify(row.text)
        cpu_ms.append((time.thread_time() - cpu_start) * 1000.0)
        preds.append(result.label)
        p_complex.append(result.probs["complex"])
        latencies.append(result.latency_ms)
        stages.append(result.stage)
    truth = [r.label for r in rows]
    p_by_id = {id(r): p for r, p in zip(rows, p_complex, strict=True)}
    if url:
        routes, route_ms = _route_via_gateway(all_rows, url)
        routed_by = f"POST {url.rstrip('/')}/v1/route"
    else:
        routes = _routed(all_rows, [p_by_id.get(id(r)) for r in all_rows], threshold)
        route_ms = []
        routed_by = f"model + card threshold {threshold} (multi-turn rows: cloud by rule)"
    routing_all = routing_table(all_rows, routes)
    per_language_routing = _grouped(all_rows, routes, "lang")
    report = {
        "model": {"version": clf.version, "provider": clf.provider, "dir": str(model_dir or "default"),
                  "simple_min_confidence": threshold, "threshold_chosen_on": clf.card["thresholds"].get("chosen_on")},
        "data": {
            "files": [str(f) for f in files],
            "split": split,
            "rows": len(rows),
            "multi_turn_rows": len(all_rows) - len(rows),
            "skipped_multi_turn": load.skipped_multi_turn,
            "skipped_duplicates": load.skipped_duplicates,
            "seen_files": [str(f) for f in seen_files],
            "left_out_seen": left_out_seen,
        },
        "overall": summarize(truth, preds),
        "routing": routing_recall(truth, p_complex, threshold),
        "routed_by": routed_by,
        "routing_all": routing_all,
        "routing_per_language": per_language_routing,
        "routing_per_category": _grouped(all_rows, routes, "category"),
        "targets": verdicts(routing_all, per_language_routing),
        "per_language": {},
        "per_source": {},
        "latency": percentiles_ms(latencies),
        "cpu_time": percentiles_ms(cpu_ms),
        "route_call_latency": percentiles_ms(route_ms),
        "stages": {
            "encoder_loaded": clf.encoder is not None,
            "encoder_rows": stages.count("encoder"),
            "encoder_share": round(stages.count("encoder") / len(rows), 4),
            "latency_ngram_decided": percentiles_ms([t for t, s in zip(latencies, stages, strict=True)
                                                     if s == "ngram"]),
            "latency_encoder_decided": percentiles_ms([t for t, s in zip(latencies, stages, strict=True)
                                                       if s == "encoder"]),
        },
        "source_holdout_from_card": clf.card.get("metrics", {}).get("source_holdout", {}),
        # both stages as the router runs them, each refitted without the source (bench/encoder_source_holdout.py)
        "source_holdout_both_stages_from_card": (clf.card.get("encoder") or {}).get("source_holdout", {})
        if clf.encoder is not None else {},
        "errors": [],
    }
    for key, attr in (("per_language", "lang"), ("per_source", "source")):
        for value in sorted({getattr(r, attr) for r in rows}):
            sel = [i for i, r in enumerate(rows) if getattr(r, attr) == value]
            report[key][value] = summarize([truth[i] for i in sel], [preds[i] for i in sel])
    route_of = {id(r): x for r, x in zip(all_rows, routes, strict=True)}
    wrong = [i for i in range(len(rows)) if (route_of[id(rows[i])] == "cloud") != (truth[i] == "complex")]
    wrong.sort(key=lambda i: -abs(p_complex[i] - 0.5))
    report["errors"] = [
        {"text": rows[i].text[:160], "label": truth[i], "predicted": preds[i], "route": route_of[id(rows[i])],
         "p_complex": round(p_complex[i], 4), "lang": rows[i].lang, "category": rows[i].category,
         "source": rows[i].source}
        for i in wrong[:max_errors]
    ]
    return report


def _table(summary: dict, indent: str = "  ") -> list[str]:
    lines = [f"{indent}{'label':<9}{'precision':>10}{'recall':>9}{'f1':>8}{'support':>9}"]
    for label, m in summary["per_label"].items():
        lines.append(
            f"{indent}{label:<9}{m['precision']:>10.4f}{m['recall']:>9.4f}{m['f1']:>8.4f}{m['support']:>9d}"
        )
    return lines


def format_report(report: dict) -> str:
    """Human-readable report: the sections the issue asks for, in a fixed order."""
    o = report["overall"]
    labels = o["confusion"]["labels"]
    lines = [
        f"model {report['model']['version']} on {report['model']['provider']}; "
        f"{report['data']['rows']} rows (split={report['data']['split']}, "
        f"{report['data']['skipped_multi_turn']} multi-turn rows skipped: "
        "the policy routes those by turn count)",
        *([f"{report['data']['left_out_seen']} rows left out: their text is also in the training data given "
           f"({len(report['data']['seen_files'])} files)"] if report["data"].get("seen_files") else []),
        "",
        "== accuracy ==",
        f"  accuracy {o['accuracy']:.4f} (n={o['n']})",
        "",
        "== per label ==",
        *_table(o),
        "",
        "== confusion matrix (rows = true, columns = predicted) ==",
        "  " + " " * 9 + "".join(f"{label:>9}" for label in labels),
    ]
    for label, row in zip(labels, o["confusion"]["matrix"], strict=True):
        lines.append(f"  {label:<9}" + "".join(f"{v:>9d}" for v in row))
    r = report["routing"]
    lines += [
        "",
        "== routing with the card's confidence threshold ==",
        f"  simple below confidence {r['min_simple_confidence']} goes to the cloud: "
        f"complex->cloud {r['complex_to_cloud']}, simple->cloud {r['simple_to_cloud']}",
        "",
        "== per language ==",
    ]
    for lang, m in report["per_language"].items():
        c = m["per_label"]["complex"]
        s = m["per_label"]["simple"]
        lines.append(
            f"  {lang:<6} n={m['n']:<6} accuracy {m['accuracy']:.4f}  complex recall {c['recall']:.4f} "
            f"(n={c['support']})  simple recall {s['recall']:.4f} (n={s['support']})"
        )
    lines += ["", "== per source =="]
    for source, m in report["per_source"].items():
        lines.append(f"  {source:<22} n={m['n']:<6} accuracy {m['accuracy']:.4f}")
    ra = report["routing_all"]
    lines += [
        "",
        f"== routing: edge or cloud, as deployed ({report['routed_by']}) ==",
        f"  n={ra['n']} ({report['data']['multi_turn_rows']} multi-turn)  accuracy {ra['accuracy']}  "
        f"complex->cloud {ra['complex_to_cloud']}  simple->cloud {ra['simple_to_cloud']}",
        f"  {'group':<22}{'n':>6}{'simple':>8}{'complex':>9}{'accuracy':>10}{'simple->cloud':>15}"
        f"{'complex->edge':>15}",
    ]
    for title, table in (("language", report["routing_per_language"]), ("category", report["routing_per_category"])):
        for name, m in table.items():
            lines.append(
                f"  {title[:4] + ':' + name:<22}{m['n']:>6}{m['n_simple']:>8}{m['n_complex']:>9}"
                f"{m['accuracy']:>10.4f}{m['simple_sent_to_cloud']:>15}{m['complex_kept_on_edge']:>15}"
            )
    lines += ["", "== targets (routing, as deployed) =="]
    for name, v in report["targets"].items():
        lines.append(f"  {name:<18} {v['target']:<8} {v['value']!s:<8} {'met' if v['met'] else 'NOT MET'}")
    holdout = report.get("source_holdout_from_card") or {}
    both = (report.get("source_holdout_both_stages_from_card") or {}).get("sources", {})
    if holdout:
        lines += ["", "== leave-one-source-out on the shared data (from the model card: trained without it) =="]
        if both:
            lines.append(f"  {'':<22} {'':<8} n-gram label   routed at the cut: n-gram alone   both stages")
        for source, m in holdout.items():
            line = f"  {source:<22} n={m['n']:<6} accuracy {m['accuracy']:.4f}"
            if source in both:
                b = both[source]
                line += f"   {b['ngram_routing_accuracy']:>29.4f}   {b['cascade_routing_accuracy']:>11.4f}"
            lines.append(line)
    lat = report["latency"]
    cpu = report["cpu_time"]
    lines += [
        "",
        "== latency per request (features + ONNX, one at a time) ==",
        f"  P50 {lat['p50_ms']:.4f} ms  P90 {lat['p90_ms']:.4f} ms  P99 {lat['p99_ms']:.4f} ms  "
        f"max {lat['max_ms']:.4f} ms  (n={lat['n']})",
        f"  CPU time: P50 {cpu['p50_ms']:.4f} ms  P99 {cpu['p99_ms']:.4f} ms  (time on a core, without waits)",
    ]
    st = report.get("stages") or {}
    if st.get("encoder_loaded"):
        fast, slow = st["latency_ngram_decided"], st["latency_encoder_decided"]
        lines.append(f"  decided by the n-gram stage: {fast.get('n') or 0} rows, "
                     f"P99 {fast.get('p99_ms') or 0:.4f} ms; by the encoder: {st['encoder_rows']} rows "
                     f"({st['encoder_share']:.1%}), P50 {slow.get('p50_ms') or 0:.3f} ms, "
                     f"P99 {slow.get('p99_ms') or 0:.3f} ms")
    call = report.get("route_call_latency") or {}
    if call.get("n"):
        lines.append(f"  POST /v1/route round trip: P50 {call['p50_ms']:.3f} ms  P99 {call['p99_ms']:.3f} ms")
    if report["errors"]:
        lines += ["", "== routing mistakes, most confident first =="]
        for e in report["errors"]:
            text = e["text"].replace("\n", " ")[:100]
            lines.append(f"  [{e['label']}->{e['route']} p={e['p_complex']:.3f} {e['category']}] {text}")
    return "\n".join(lines)


def write_json(report: dict, path: str | Path) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
