"""Leave one shared source out, for both stages of the router: does the cascade know difficulty or a style?

Each shared source (clinc150, gsm8k, …) is all one label, so a model can learn a source's style instead of a
request's difficulty. The n-gram stage's card has its own figures (``metrics.source_holdout``: a fit without the
source, accuracy on all of its rows at the label cut). This bench gives the same for the stages as the router runs
them, per source:

* the n-gram stage refitted without the source (the card's recipe: ``TrainConfig`` from the card, the same
  design with its augmented copies), its output shifted by the card's label cut as the shipped graph is;
* the encoder's head refitted without the source, on the shipped encoder's own embeddings (``encoder.onnx``'s
  ``embedding`` output: what the device computes), with the build's recipe (``models.encoder.build.fit_head``);
* the card's stack and band: both were fitted or set on the kiosk threshold split, which holds no shared source;
* routed at the card's cut (``thresholds.simple_min_confidence``): the n-gram stage alone, and the cascade.

The rows must be the ones the card names (``prepare_run_rows``). By default they are read from the shipped model's
paths in this repository (``bench/shipped_run.py``); the shipped model also trained on the shared routing data,
which a clone does not have, so ``--shared-data DIR`` names that folder (without it the digest check says the rows
differ). Another model takes its own ``--data``, ``--threshold-data`` and ``--exclude-data``. The jobs are
``models.intent.train``'s own (``source_holdout_jobs``, run by ``run_holdout_jobs`` in forked processes). About 80
minutes on two cores. Writes ``bench/results/encoder_source_holdout.json``; needs the ``train`` extra.

    .venv/bin/python -m bench.encoder_source_holdout --shared-data DIR [--write-card] [--source clinc150 ...]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def _train_config(card: dict):
    from models.intent.train import TrainConfig

    m = card["model"]
    if m.get("type") != "hidden_layer":
        raise ValueError("this bench refits the hidden-layer n-gram model the card describes")
    return TrainConfig(seed=int(m["seed"]), augment_copies=int(m["augment_copies"]),
                       kiosk_weight=float(m["kiosk_weight"]), model="hidden-layer", hidden=int(m["hidden_units"]),
                       epochs=int(m["epochs"]), alpha=float(m["alpha"]), source_holdout=False,
                       split_recall=float(card["thresholds"]["split_recall"]))


def _job(rest: np.ndarray, held: np.ndarray, *, rows: list, design, tc, embeddings: np.ndarray, stack, cut: float,
         label_shift: float) -> dict:
    """One source: the n-gram stage and the head fitted on ``rest``, both stages scored on ``held``."""
    from models.encoder.build import fit_head
    from models.encoder.runtime import clipped_logits
    from models.intent.train import _fit, _p_complex

    started = time.time()
    p_raw = _p_complex(design, _fit(design, rest, tc), held)
    p_ngram = 1 / (1 + np.exp(-(clipped_logits(p_raw) - label_shift)))  # as the shipped graph: the label cut baked in
    head = fit_head(embeddings[rest], np.asarray([rows[i].label == "complex" for i in rest]),
                    np.asarray([rows[i].source.startswith("kiosk") for i in rest]))
    head_logit = head.logits(embeddings[held])

    unsure = np.maximum(p_ngram, 1 - p_ngram) < stack.band_confidence
    p_final = np.asarray([stack.p_complex(float(p), float(z)) if u else float(p)
                          for p, z, u in zip(p_ngram, head_logit, unsure, strict=True)])
    is_complex = np.asarray([rows[i].label == "complex" for i in held])

    def routed_right(p_complex: np.ndarray) -> float:
        to_cloud = (1 - p_complex) < cut
        return round(float(np.mean(to_cloud == is_complex)), 4)

    return {
        "n": int(held.size), "labels": dict(Counter(rows[i].label for i in held)),
        "ngram_label_accuracy": round(float(np.mean((p_raw >= 0.5) == is_complex)), 4),  # the card's measure
        "ngram_routing_accuracy": routed_right(p_ngram),
        "cascade_routing_accuracy": routed_right(p_final),
        "encoder_share": round(float(unsure.mean()), 4),
        "seconds": round(time.time() - started, 1),
    }


def measure(model_dir: Path, data: list[str], threshold_data: list[str], exclude_data: list[str],
            sources: tuple[str, ...] = (), log=print) -> dict:
    """Both stages refitted without each shared source (``sources``: only those), scored on all of its rows."""
    from models.intent.augment import Phrases
    from models.intent.features import FeatureConfig
    from models.intent.runtime import CARD_FILE, IntentClassifier
    from models.intent.train import _design, prepare_run_rows, run_holdout_jobs, source_holdout_jobs

    card = json.loads((model_dir / CARD_FILE).read_text(encoding="utf-8"))
    prepared, _train = prepare_run_rows(card, data, threshold_data, exclude_data)
    rows = prepared.rows
    tc = _train_config(card)
    phrases = Phrases.load()
    if phrases.sources() != card["model"]["augment_phrases"]:
        raise ValueError("the augmentation phrases differ from the card's: the refit would not be the card's recipe")
    jobs = [job for job in source_holdout_jobs(rows, prepared.train_idx) if not sources or job[0] in sources]
    started = time.time()
    design = _design(rows, FeatureConfig.from_dict(card["features"]), tc, phrases)
    log(f"design: {design.x.shape[0]} rows of features ({len(rows)} texts) in {time.time() - started:.0f} s")

    clf = IntentClassifier.load(model_dir)
    if clf.encoder is None:
        raise ValueError(f"{model_dir} has no encoder stage")
    started = time.time()
    embeddings = np.stack([clf.encoder.embedding(r.text) for r in rows]).astype(np.float32)
    log(f"embedded {len(rows)} texts in {time.time() - started:.0f} s")

    decision = float(card["thresholds"]["decision_p_complex"])
    work = functools.partial(_job, rows=rows, design=design, tc=tc, embeddings=embeddings, stack=clf.encoder.stack,
                             cut=clf.confidence_threshold, label_shift=math.log(decision / (1 - decision)))
    results = run_holdout_jobs(jobs, lambda _source, rest, held: work(rest, held), log)
    card_holdout = card.get("metrics", {}).get("source_holdout", {})
    for source, figures in results.items():
        figures["card_ngram_label_accuracy"] = card_holdout.get(source, {}).get("accuracy")
    return {"model": card["version"], "cut_simple_min_confidence": clf.confidence_threshold,
            "band_confidence": clf.encoder.stack.band_confidence, "sources": results}


def write_to_card(model_dir: Path, report: dict) -> None:
    """Record the figures in the model's card (``encoder.source_holdout``; ``eval-intent`` prints them), for the
    model they were measured on only.

    A card without the n-gram stage's own figures (a ``train-intent --no-source-holdout`` run) gets them here
    too, as ``metrics.source_holdout``: the refits are ``train-intent``'s own jobs and ``ngram_label_accuracy``
    its measure (the shipped model's run gave the card's figures source for source), so the 80-minute refits
    need not run twice. A card that has them keeps its own."""
    from models.intent.runtime import CARD_FILE
    from models.intent.train import write_card

    card = json.loads((model_dir / CARD_FILE).read_text(encoding="utf-8"))
    if card["version"] != report["model"] or not card.get("encoder"):
        raise ValueError(f"the report is of {report['model']}, not of {model_dir}'s model {card['version']}")
    keep = ("n", "labels", "ngram_routing_accuracy", "cascade_routing_accuracy", "encoder_share")
    card["encoder"]["source_holdout"] = {
        "by": "bench/encoder_source_holdout.py: both stages refitted without the source, routed at the card's cut",
        "sources": {source: {k: f[k] for k in keep} for source, f in report["sources"].items() if "error" not in f},
    }
    metrics = card.setdefault("metrics", {})
    if not metrics.get("source_holdout"):
        metrics["source_holdout"] = {source: {"accuracy": f["ngram_label_accuracy"], "labels": f["labels"], "n": f["n"]}
                                     for source, f in report["sources"].items() if "error" not in f}
        metrics["source_holdout_by"] = "bench/encoder_source_holdout.py (train-intent's jobs, its label accuracy)"
    write_card(card, model_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=None, metavar="DIR",
                        help="a model with both stages (default: the shipped one)")
    parser.add_argument("--shared-data", type=Path, default=None, metavar="DIR",
                        help="the shared routing data the shipped model also trained on (its datasets/routing folder)")
    parser.add_argument("--data", nargs="+", default=None, metavar="PATH",
                        help="the model's train-intent --data (default: the shipped model's, bench/shipped_run.py)")
    parser.add_argument("--threshold-data", nargs="+", default=None, metavar="PATH")
    parser.add_argument("--exclude-data", nargs="+", default=None, metavar="PATH")
    parser.add_argument("--source", action="append", default=[], metavar="NAME",
                        help="hold out only this source (repeatable; default: every shared source)")
    parser.add_argument("--out", type=Path, default=RESULTS / "encoder_source_holdout.json")
    parser.add_argument("--write-card", action="store_true",
                        help="record the figures in the model's card (encoder.source_holdout)")
    parser.add_argument("--from-report", type=Path, default=None, metavar="JSON",
                        help="print (and with --write-card record) a report already measured, measuring nothing")
    args = parser.parse_args(argv)
    from models.intent.runtime import DEFAULT_MODEL_DIR

    model_dir = args.model or DEFAULT_MODEL_DIR
    if args.from_report is not None:
        report = json.loads(args.from_report.read_text(encoding="utf-8"))
    else:
        from bench.shipped_run import EXCLUDE_PATHS, THRESHOLD_PATHS, train_paths

        shared = [str(args.shared_data)] if args.shared_data else []
        data = args.data + shared if args.data else train_paths(args.shared_data)
        try:
            report = measure(model_dir, data, args.threshold_data or THRESHOLD_PATHS,
                             args.exclude_data if args.exclude_data is not None else EXCLUDE_PATHS,
                             tuple(args.source))
        except (FileNotFoundError, ValueError) as exc:
            hint = "" if args.shared_data or args.data else " (the shipped model needs --shared-data DIR)"
            print(f"error: {exc}{hint}", file=sys.stderr)
            return 2
        report["machine"] = {"cpus": os.cpu_count()}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
    if args.write_card:
        write_to_card(model_dir, report)
    print(f"\nleave one source out, model {report['model']}, routed at simple confidence >= "
          f"{report['cut_simple_min_confidence']}")
    print(f"{'source':<18} {'n':>5} {'label':>8}  card n-gram  n-gram routed  cascade routed  encoder share")
    for source, f in report["sources"].items():
        if "error" in f:
            print(f"{source:<18} error: {f['error']}")
            continue
        label = max(f["labels"], key=f["labels"].get)
        card = f"{f['card_ngram_label_accuracy']:.4f}" if f["card_ngram_label_accuracy"] is not None else "-"
        print(f"{source:<18} {f['n']:>5} {label:>8}  {card:>11}  {f['ngram_routing_accuracy']:>13.4f}  "
              f"{f['cascade_routing_accuracy']:>14.4f}  {f['encoder_share']:>13.4f}")
    if args.from_report is None:
        print(f"wrote {args.out}")
    if args.write_card:
        print(f"recorded in {model_dir / 'card.json'} (encoder.source_holdout; metrics.source_holdout where absent)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
