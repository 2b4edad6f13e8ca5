"""Two intent classifiers' decision time, interleaved request by request.

The route-overhead benchmark measures the whole decision, and on this kind of VM two runs minutes apart
drift by 20-30 %, more than a model swap changes. Here both models (the shipped one and ``--other``, e.g.
the model before, extracted with ``git show <commit>:models/intent/default/{intent.onnx,card.json}``)
classify the same kiosk-length texts alternately, so the host's drift falls on both alike, and the report
is each model's P50/P99 and their ratio. Features and ONNX run included; nothing else.

    .venv/bin/python -m bench.intent_models --other /tmp/model_before [--requests 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

from bench.percentile import percentile
from bench.route_overhead import RESULTS, kiosk_texts


def measure(other: Path, limit: int) -> dict:
    from models.intent.runtime import IntentClassifier

    models = {"shipped": IntentClassifier.load(), "other": IntentClassifier.load(other)}
    times: dict[str, list[float]] = {name: [] for name in models}
    texts = kiosk_texts()
    random.Random(1).shuffle(texts)  # both languages and every file in the first ``limit``
    texts = texts[:limit]
    for i, text in enumerate(texts):
        order = list(models.items()) if i % 2 else list(models.items())[::-1]  # who goes first alternates
        for name, clf in order:
            t0 = time.perf_counter()
            clf.classify(text)
            times[name].append((time.perf_counter() - t0) * 1000.0)
    out: dict = {"requests": len(texts), "models": {}}
    for name, clf in models.items():
        out["models"][name] = {"version": clf.version, "p50_ms": percentile(times[name], 50),
                               "p99_ms": percentile(times[name], 99)}
    shipped, peer = out["models"]["shipped"], out["models"]["other"]
    out["ratio_shipped_to_other"] = {"p50": shipped["p50_ms"] / peer["p50_ms"],
                                     "p99": shipped["p99_ms"] / peer["p99_ms"]}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--other", type=Path, required=True, metavar="DIR", help="the model to compare with")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=RESULTS / "intent_models.json")
    args = parser.parse_args(argv)
    report = measure(args.other, args.requests)
    report["machine"] = {"cpus": os.cpu_count()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    for name, m in report["models"].items():
        print(f"{name:8} {m['version']}: P50 {m['p50_ms']:.3f} ms   P99 {m['p99_ms']:.3f} ms")
    r = report["ratio_shipped_to_other"]
    print(f"shipped / other: P50 {r['p50']:.3f}x   P99 {r['p99']:.3f}x   ({report['requests']} texts)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
