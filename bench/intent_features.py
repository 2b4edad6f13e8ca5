"""The intent features' time alone: ``models.intent.features.featurize`` against its specification.

The specification is the feature function the shipped model was trained on, kept in
``tests/intent/reference_features.py`` (a test checks the two agree bit for bit). Three run on the same
kiosk texts (the single-turn rows of ``models/intent/data``, up to 600 characters, as in
``bench.route_overhead``), interleaved text by text so that the machine's drift hits them alike: the
specification, ``featurize`` in its Python and numpy spelling (the C module ``_textfeatures`` switched off,
as on a machine where it was not built) and ``featurize`` as installed. Each text's time is the best of
``--repeat`` runs. The difficulty-cue scan is measured the same way against its own specification
(``tests/intent/reference_cues.py``: a step per word, one plain alternation for the Chinese terms). Prints
P50/P99 of each and the median per-text ratios, writes ``bench/results/intent_features.json``.

    .venv/bin/python -m bench.intent_features [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.percentile import percentile
from bench.route_overhead import RESULTS, kiosk_texts


def _interleaved(items: list, functions: dict[str, Callable], repeat: int) -> dict[str, list[float]]:
    """Per item, the best of ``repeat`` runs of each function, the functions alternating (µs)."""
    times: dict[str, list[float]] = {name: [] for name in functions}
    clock = time.perf_counter
    for item in items:
        best = dict.fromkeys(functions, float("inf"))
        for _ in range(repeat):
            for name, function in functions.items():
                start = clock()
                function(item)
                best[name] = min(best[name], clock() - start)
        for name, value in best.items():
            times[name].append(value * 1e6)
    return times


def _python_spelling(function: Callable) -> Callable:
    """``function`` with the C module switched off in ``features`` and ``cues`` for the call."""
    from models.intent import cues, features

    def call(item: object) -> object:
        module = features._textfeatures
        features._textfeatures = cues._textfeatures = None
        try:
            return function(item)
        finally:
            features._textfeatures = cues._textfeatures = module

    return call


def _stats(values: list[float]) -> dict:
    return {"p50_us": percentile(values, 50), "p99_us": percentile(values, 99), "max_us": max(values),
            "mean_us": statistics.fmean(values)}


def _ratios(new_us: list[float], spec_us: list[float]) -> dict:
    return {"median_ratio": statistics.median(n / s for n, s in zip(new_us, spec_us, strict=True)),
            "p99_ratio": percentile(new_us, 99) / percentile(spec_us, 99)}


def measure(repeat: int, limit: int | None = None) -> dict:
    from models.intent.cues import cue_tokens
    from models.intent.features import FeatureConfig, featurize, implementation, normalize
    from tests.intent.reference_cues import cue_tokens as cue_specification
    from tests.intent.reference_features import featurize as specification

    texts = kiosk_texts()[:limit]
    config = FeatureConfig()
    fast = lambda t: featurize(t, config)  # noqa: E731
    times = _interleaved(texts, {"specification": lambda t: specification(t, config),
                                 "python": _python_spelling(fast), "featurize": fast}, repeat)
    # The difficulty-cue scan alone (one call per view in ``featurize``), on the normalised texts.
    norms = [normalize(text) for text in texts]
    cue_times = _interleaved(norms, {"specification": cue_specification, "python": _python_spelling(cue_tokens),
                                     "cue_tokens": cue_tokens}, repeat)
    return {
        "texts": len(texts),
        "repeat": repeat,
        "implementation": implementation(),
        **{name: _stats(values) for name, values in times.items()},
        **_ratios(times["featurize"], times["specification"]),
        "against_python": _ratios(times["featurize"], times["python"]),
        "cues": {**{name: _stats(values) for name, values in cue_times.items()},
                 **_ratios(cue_times["cue_tokens"], cue_times["specification"]),
                 "against_python": _ratios(cue_times["cue_tokens"], cue_times["python"])},
        "machine": {"cpus": os.cpu_count()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--limit", type=int, default=None, help="only the first N texts (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS / "intent_features.json")
    args = parser.parse_args(argv)
    report = measure(args.repeat, args.limit)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"{report['texts']} kiosk texts, best of {report['repeat']} each; featurize as installed: "
          f"text features in {report['implementation']}; python: the C module switched off")
    for name in ("specification", "python", "featurize"):
        s = report[name]
        print(f"  {name:14} p50 {s['p50_us']:7.1f} us   p99 {s['p99_us']:7.1f} us   max {s['max_us']:7.1f} us")
    against = report["against_python"]
    print(f"  featurize / specification: median per text {report['median_ratio']:.3f}, P99 {report['p99_ratio']:.3f}; "
          f"/ python: {against['median_ratio']:.3f}, P99 {against['p99_ratio']:.3f}")
    cues = report["cues"]
    for name in ("specification", "python", "cue_tokens"):
        s = cues[name]
        print(f"  cues: {name:14} mean {s['mean_us']:6.1f} us   p50 {s['p50_us']:6.1f} us   p99 {s['p99_us']:6.1f} us")
    against = cues["against_python"]
    print(f"  cue_tokens / specification: median per text {cues['median_ratio']:.3f}, P99 {cues['p99_ratio']:.3f}; "
          f"/ python: {against['median_ratio']:.3f}, P99 {against['p99_ratio']:.3f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
