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


def evaluate(
    data: Sequence[str | Path],
    model_dir: str | Path | None = None,
    split: str = "all",
    providers: list[str] | None = None,
    max_errors: int = 15,
) -> dict:
    """Classify every row of ``data`` and return the report (see ``format_report``)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}")
    files = ds.expand_paths(data, include_test_files=True)
    rows, load = ds.load_rows(files)
    if split != "all":
        rows = [r for r in rows if ds.is_dev(r.text) == (split == "dev")]
    if not rows:
        raise ValueError("no rows to evaluate")
    clf = IntentClassifier.load(model_dir, providers=providers)
    threshold = clf.confidence_threshold
    preds: list[str] = []
    p_complex: list[float] = []
    latencies: list[float] = []
    cpu_ms: list[float] = []
    for row in rows:
        cpu_start = time.thread_time()
        result = clf.classify(row.text)
        cpu_ms.append((time.thread_time() - cpu_start) * 1000.0)
        preds.append(result.label)
        p_complex.append(result.probs["complex"])
        latencies.append(result.latency_ms)
    truth = [r.label for r in rows]
    report = {
        "model": {"version": clf.version, "provider": clf.provider, "dir": str(model_dir or "default")},
        "data": {
            "files": [str(f) for f in files],
            "split": split,
            "rows": len(rows),
            "skipped_multi_turn": load.skipped_multi_turn,
            "skipped_duplicates": load.skipped_duplicates,
        },
        "overall": summarize(truth, preds),
        "routing": routing_recall(truth, p_complex, threshold),
        "per_language": {},
        "per_source": {},
        "latency": percentiles_ms(latencies),
        "cpu_time": percentiles_ms(cpu_ms),
        "errors": [],
    }
    for key, attr in (("per_language", "lang"), ("per_source", "source")):
        for value in sorted({getattr(r, attr) for r in rows}):
            sel = [i for i, r in enumerate(rows) if getattr(r, attr) == value]
            report[key][value] = summarize([truth[i] for i in sel], [preds[i] for i in sel])
    wrong = [i for i in range(len(rows)) if preds[i] != truth[i]]
    wrong.sort(key=lambda i: -abs(p_complex[i] - 0.5))
    report["errors"] = [
        {"text": rows[i].text[:160], "label": truth[i], "predicted": preds[i],
         "p_complex": round(p_complex[i], 4), "lang": rows[i].lang, "source": rows[i].source}
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
    lat = report["latency"]
    cpu = report["cpu_time"]
    lines += [
        "",
        "== latency per request (features + ONNX, one at a time) ==",
        f"  P50 {lat['p50_ms']:.4f} ms  P90 {lat['p90_ms']:.4f} ms  P99 {lat['p99_ms']:.4f} ms  "
        f"max {lat['max_ms']:.4f} ms  (n={lat['n']})",
        f"  CPU time: P50 {cpu['p50_ms']:.4f} ms  P99 {cpu['p99_ms']:.4f} ms  (time on a core, without waits)",
    ]
    if report["errors"]:
        lines += ["", "== most confident mistakes =="]
        for e in report["errors"]:
            text = e["text"].replace("\n", " ")[:100]
            lines.append(f"  [{e['label']}->{e['predicted']} p={e['p_complex']:.3f} {e['source']}] {text}")
    return "\n".join(lines)


def write_json(report: dict, path: str | Path) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
