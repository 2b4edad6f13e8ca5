"""Train the intent classifier and export it to ONNX with its model card (needs the ``train`` extra).

Model: L2-regularised logistic regression on the hashed features of ``features.py`` (``--model logistic``),
or a network with one hidden layer of 16 ReLU units on the same features (``--model hidden-layer``,
``hidden_layer.py``). Why linear by default: on a few thousand rows a linear model over character n-grams
generalises well, trains in seconds, is deterministic (liblinear with a fixed seed), and exports to a
six-node ONNX graph (Gather, Mul, ReduceSum, Add, Mul, Softmax) whose run time is dominated by feature
hashing, not the model. The hidden layer can weigh a long story by what the final ask is, which one weight
per feature cannot; it takes minutes to fit instead of seconds. Both export the same ONNX inputs and outputs,
so the runtime does not know which it runs.

Reproducibility: rows are sorted by a content key, each row's augmentation uses its own
``random.Random(f"{seed}:{content key}")``, folds and the dev split are content hashes, liblinear gets
``random_state=seed``, and neither the ONNX file nor the card contains a timestamp or an absolute path.
The same data and seed give byte-identical ``intent.onnx`` and ``card.json``.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import multiprocessing.queues
import os
import queue as queue_module
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from onnx import helper, numpy_helper
from scipy import sparse
from sklearn.linear_model import LogisticRegression

from models.intent import dataset as ds
from models.intent.augment import KINDS, Phrases, variant
from models.intent.features import FeatureConfig, featurize
from models.intent.hidden_layer import HiddenLayerModel, fit_hidden_layer
from models.intent.metrics import routing_recall, summarize
from models.intent.onnx_graph import LABELS, write_intent_graph
from models.intent.runtime import CARD_FILE, MODEL_FILE, IntentClassifier
from models.intent.thresholds import (
    Thresholds,
    logit,
    routing_report,
    shift,
    thresholds_on_split,
    thresholds_out_of_fold,
)

MODEL_VERSION_MAJOR = 1
KIOSK_SOURCE_PREFIX = "kiosk"
MODEL_KINDS = ("logistic", "hidden-layer")


@dataclass(frozen=True)
class TrainConfig:
    """Knobs of one training run; all of them are written to the card."""

    seed: int = 13
    c: float = 1.0
    augment_copies: int = 3  # one variant of each kind in ``augment.KINDS``, in that order
    kiosk_weight: float = 16.0
    folds: int = 5
    target_complex_recall: float = 0.985  # for the label itself when no threshold split is given
    target_routing_recall: float = 0.99  # the hard constraint: complex requests that must reach the cloud
    # The cut is chosen for this recall on the threshold split, by default above the constraint: a cut placed at
    # 0.99 on ~300 complex rows falls below 0.99 on fresh data about half the time. The shipped model holds it
    # at 0.99 (``--split-recall``) on a split of 930 complex rows that includes earlier fresh sets.
    split_recall: float = 0.995
    source_holdout: bool = True
    out_of_fold: bool = False  # five more fits; always done when there is no threshold split
    model: str = "logistic"  # one of MODEL_KINDS
    hidden: int = 16  # hidden-layer units
    epochs: int = 12  # hidden-layer training epochs (a fixed count: no split is spared for early stopping)
    alpha: float = 1e-4  # hidden-layer L2 penalty

    def __post_init__(self) -> None:
        if self.model not in MODEL_KINDS:
            raise ValueError(f"model must be one of {MODEL_KINDS}, not {self.model!r}")
        if not self.target_routing_recall <= self.split_recall < 1.0:
            raise ValueError(f"split recall must be at least the routing constraint {self.target_routing_recall} "
                             f"and below 1, not {self.split_recall}")


def _objective(tc: TrainConfig) -> str:
    """The card's sentence for the threshold's objective, with the margin when there is one."""
    how = (f"enforced as >= {tc.split_recall} on the threshold split for a margin"
           if tc.split_recall > tc.target_routing_recall else "held at exactly that on the threshold split")
    return (f"complex recall >= {tc.target_routing_recall} (hard constraint, {how}); within it, the fewest "
            "simple requests sent to the cloud")


@dataclass(frozen=True)
class _Linear:
    """A fitted logistic regression: ``logit = x · weights + bias``."""

    weights: np.ndarray
    bias: float

    def p_complex(self, x: sparse.csr_matrix) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(x @ self.weights.astype(np.float64) + self.bias)))

    def shifted(self, delta: float) -> _Linear:
        return _Linear(self.weights, self.bias - delta)

    def export(self, path: Path, version: str) -> None:
        export_onnx(self.weights, self.bias, path, version)


_Model = _Linear | HiddenLayerModel


# ---------------------------------------------------------------------------------------------- fitting
def feature_matrix(texts: Sequence[str], fc: FeatureConfig) -> sparse.csr_matrix:
    """The texts' hashed features as rows of one sparse matrix, featurised as the kiosk's runtime does."""
    indices, values, indptr = [], [], [0]
    for text in texts:
        idx, val = featurize(text, fc)
        indices.append(idx)
        values.append(val)
        indptr.append(indptr[-1] + idx.shape[0])
    m = sparse.csr_matrix(
        (np.concatenate(values).astype(np.float64), np.concatenate(indices), np.asarray(indptr)),
        shape=(len(texts), fc.dim),
    )
    m.sum_duplicates()
    return m


@dataclass(frozen=True)
class _Design:
    """Features of every row and its augmented copies, computed once and sliced for each fit.

    Each row's copies come from ``random.Random(f"{seed}:{text key}")``, so they do not depend on which
    other rows are in a fit: a fold, a hold-out and the final model all see the same copy of a row.
    """

    x: sparse.csr_matrix
    y: np.ndarray  # 1 = complex
    weight: np.ndarray  # before class balancing
    owner: np.ndarray  # row index each matrix row belongs to
    original: np.ndarray  # matrix row of each row's unaugmented text


def _design(rows: Sequence[ds.Row], fc: FeatureConfig, tc: TrainConfig, phrases: Phrases) -> _Design:
    texts: list[str] = []
    y: list[int] = []
    w: list[float] = []
    owner: list[int] = []
    original: list[int] = []
    for i, row in enumerate(rows):
        rng = random.Random(f"{tc.seed}:{ds.text_key(row.text)}")
        base = tc.kiosk_weight if row.source.startswith(KIOSK_SOURCE_PREFIX) else 1.0
        target = LABELS.index(row.label)
        original.append(len(texts))
        kinds = [KINDS[k % len(KINDS)] for k in range(tc.augment_copies)]
        variants = [row.text] + [variant(row.text, row.lang, kind, rng, phrases) for kind in kinds]
        for text in variants:
            texts.append(text)
            y.append(target)
            w.append(base)
            owner.append(i)
    return _Design(
        x=feature_matrix(texts, fc),
        y=np.asarray(y, dtype=np.int64),
        weight=np.asarray(w, dtype=np.float64),
        owner=np.asarray(owner, dtype=np.int64),
        original=np.asarray(original, dtype=np.int64),
    )


def _fit(design: _Design, row_idx: np.ndarray, tc: TrainConfig) -> _Model:
    """Fit on the given rows (with their augmented copies); classes balanced by sample weight."""
    mask = np.isin(design.owner, row_idx)
    y = design.y[mask]
    if len(np.unique(y)) < 2:
        raise ValueError("training data must contain both simple and complex rows")
    w = design.weight[mask].copy()
    for cls in (0, 1):
        sel = y == cls
        w[sel] *= w.sum() / (2.0 * w[sel].sum())
    if tc.model == "hidden-layer":
        return fit_hidden_layer(design.x[mask], y, w, hidden=tc.hidden, epochs=tc.epochs, alpha=tc.alpha,
                                seed=tc.seed)
    # Dual coordinate descent: far fewer rows than hash slots, so it is ~100x faster than the primal
    # solver here and reaches the same optimum.
    model = LogisticRegression(C=tc.c, solver="liblinear", dual=True, random_state=tc.seed, max_iter=1000)
    model.fit(design.x[mask], y, sample_weight=w)
    return _Linear(model.coef_[0].astype(np.float32), float(model.intercept_[0]))


def _p_complex(design: _Design, model: _Model, row_idx: np.ndarray) -> np.ndarray:
    return model.p_complex(design.x[design.original[row_idx]])


def _fold(row: ds.Row, folds: int) -> int:
    return int(ds.text_key(row.text)[8:16], 16) % folds


# ---------------------------------------------------------------------------------------------- export
def export_onnx(weights: np.ndarray, bias: float, path: Path, version: str) -> None:
    """Write the sparse-input logistic regression as an ONNX graph (``onnx_graph`` has the contract)."""
    inits = [
        numpy_helper.from_array(weights.astype(np.float32), "weights"),
        numpy_helper.from_array(np.asarray(bias, dtype=np.float32), "bias"),
    ]
    nodes = [
        helper.make_node("Gather", ["weights", "indices"], ["w_sel"], axis=0),
        helper.make_node("Mul", ["w_sel", "values"], ["contrib"]),
        helper.make_node("ReduceSum", ["contrib"], ["dot"], keepdims=0),
        helper.make_node("Add", ["dot", "bias"], ["logit"]),
    ]
    write_intent_graph(nodes, inits, "edgecloud_intent", path, version)


# ---------------------------------------------------------------------------------------------- driver
def _by_language(rows: Sequence[ds.Row], pred: Sequence[str]) -> dict:
    out = {}
    for lang in sorted({r.lang for r in rows}):
        sel = [i for i, r in enumerate(rows) if r.lang == lang]
        out[lang] = summarize([rows[i].label for i in sel], [pred[i] for i in sel])
    return out


def _holdout_accuracy(rows: list[ds.Row], rest: np.ndarray, held: np.ndarray, design: _Design,
                      tc: TrainConfig) -> dict:
    p = _p_complex(design, _fit(design, rest, tc), held)
    m = summarize([rows[i].label for i in held], ["complex" if x >= 0.5 else "simple" for x in p])
    return {"n": m["n"], "labels": dict(Counter(rows[i].label for i in held)), "accuracy": m["accuracy"]}


HoldoutJob = tuple[str, np.ndarray, np.ndarray]  # source, the rows fitted on (all but it), its rows


def source_holdout_jobs(rows: list[ds.Row], train_idx: np.ndarray) -> list[HoldoutJob]:
    """One job per shared source (kiosk sets are not sources to hold out): fit on every training row of the other
    sources, test on all of its rows; sources of fewer than 20 rows, or whose absence leaves one label, are skipped."""
    jobs = []
    train_set = set(train_idx.tolist())
    for source in sorted({r.source for r in rows if not r.source.startswith(KIOSK_SOURCE_PREFIX)}):
        held = np.asarray([i for i, r in enumerate(rows) if r.source == source], dtype=np.int64)
        rest = np.asarray([i for i in sorted(train_set) if rows[i].source != source], dtype=np.int64)
        if held.size >= 20 and len({rows[i].label for i in rest}) == 2:
            jobs.append((source, rest, held))
    return jobs


def _forked_worker(jobs: list[HoldoutJob], work: Callable[[str, np.ndarray, np.ndarray], dict],
                   results: multiprocessing.queues.Queue) -> None:
    for source, rest, held in jobs:
        results.put((source, work(source, rest, held)))


def run_holdout_jobs(jobs: list[HoldoutJob], work: Callable[[str, np.ndarray, np.ndarray], dict], log,
                     forked: bool = True) -> dict:
    """``work(source, rest, held)`` for every job; source -> its figures, in source order.

    A hidden-layer fit takes minutes, so the jobs are shared out over forked processes, one a core: a forked
    child reads the design matrix (a gigabyte) and whatever else ``work`` closes over from its parent's memory
    instead of a pickled copy, and sends back a few numbers. Each fit is deterministic, so the figures do not
    depend on the split. ``forked=False`` (or one core, or no fork) runs them here, one after the other."""
    workers = min(len(jobs), os.cpu_count() or 1)
    result: dict = {}
    if not forked or workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        for source, rest, held in jobs:
            result[source] = work(source, rest, held)
            log(f"  source hold-out {source:<20} {result[source]}")
        return result
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    procs = [context.Process(target=_forked_worker, args=(jobs[k::workers], work, queue)) for k in range(workers)]
    for proc in procs:
        proc.start()
    try:
        while len(result) < len(jobs):
            try:
                source, figures = queue.get(timeout=5.0)
            except queue_module.Empty:
                failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if failed:  # a child that died never reports: do not wait for it
                    raise RuntimeError(f"a source hold-out process failed (exit code {failed[0]})") from None
                continue
            result[source] = figures
            log(f"  source hold-out {source:<20} {figures}")
    finally:
        for proc in procs:
            if proc.is_alive() and len(result) < len(jobs):
                proc.terminate()
            proc.join()
    return dict(sorted(result.items()))


def _source_holdout(rows: list[ds.Row], train_idx: np.ndarray, design: _Design, tc: TrainConfig, log) -> dict:
    """Train without one whole shared source, test on all of that source's rows: does the model know
    the request's difficulty, or only the source's style? (The logistic model's fit takes seconds: no fork.)"""
    return run_holdout_jobs(source_holdout_jobs(rows, train_idx),
                            lambda _source, rest, held: _holdout_accuracy(rows, rest, held, design, tc), log,
                            forked=tc.model != "logistic")


def cut_version(base: str, routing_cut_p_complex: float) -> str:
    """A model's version: ``base`` (the training rows, which name the weights) with its routing cut in
    ten-thousandths, since the same rows with another split or split recall give the same weights and another
    routing. A base that already names a cut (a recut model's) has it replaced."""
    return f"{base.split('-cut')[0]}-cut{round(routing_cut_p_complex * 1e4):04d}"


def write_card(card: dict, out: Path) -> None:
    """``card.json`` in ``out``, keys sorted, so that the same run writes the same bytes."""
    text = json.dumps(card, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
    (out / CARD_FILE).write_text(text, encoding="utf-8")


@dataclass(frozen=True)
class PreparedRows:
    """The rows one training run reads, as ``train_intent`` and ``recut`` both need them.

    ``rows`` are sorted by text key (the order the fit and the digest see); ``is_train`` marks the rows
    fitted on (all of them when a threshold split is given, else those outside the content-hashed dev split).
    """

    rows: list[ds.Row]
    is_train: np.ndarray
    held_rows: list[ds.Row]
    held_files: list[Path]
    excluded_keys: frozenset[str]  # text keys of the held-out sets: in neither the training rows nor the split
    report: ds.LoadReport
    overlap: int  # training texts dropped because the threshold split holds them
    n_excluded: int  # training texts dropped because a held-out set holds them
    held_dropped: int  # threshold-split texts dropped because a held-out set holds them

    @property
    def use_dev(self) -> bool:
        return not self.held_rows

    @property
    def train_idx(self) -> np.ndarray:
        return np.flatnonzero(self.is_train)


def prepare_rows(data: Sequence[str | Path], threshold_data: Sequence[str | Path] = (),
                 exclude_data: Sequence[str | Path] = ()) -> PreparedRows:
    """Read training, threshold and held-out files the way a training run does: a threshold-split text is
    never trained on; a held-out text is in neither the training rows nor the split."""
    files = ds.expand_paths(data)
    rows, report = ds.load_rows(files)
    held_rows: list[ds.Row] = []
    held_files: list[Path] = []
    if threshold_data:
        held_files = ds.expand_paths(threshold_data, include_test_files=True)
        held_rows, _ = ds.load_rows(held_files)
    excluded: set[str] = set()
    if exclude_data:
        never, _ = ds.load_rows(ds.expand_paths(exclude_data, include_test_files=True))
        excluded = {ds.text_key(r.text) for r in never}
    n_held = len(held_rows)
    held_rows = [r for r in held_rows if ds.text_key(r.text) not in excluded]
    held_keys = {ds.text_key(r.text) for r in held_rows}
    overlap = sum(ds.text_key(r.text) in held_keys for r in rows)
    n_excluded = sum(ds.text_key(r.text) in excluded for r in rows)
    rows = [r for r in rows if ds.text_key(r.text) not in held_keys and ds.text_key(r.text) not in excluded]
    rows.sort(key=lambda r: ds.text_key(r.text))
    # With a threshold split written apart from the training data, that split is the dev set: the
    # content-hashed dev split would only hold back 15 % of the training rows.
    use_dev = not held_rows
    is_train = np.asarray([not (use_dev and ds.is_dev(r.text)) for r in rows], dtype=bool)
    return PreparedRows(rows, is_train, held_rows, held_files, frozenset(excluded), report, overlap, n_excluded,
                        n_held - len(held_rows))


def prepare_run_rows(card: dict, data: Sequence[str | Path], threshold_data: Sequence[str | Path],
                     exclude_data: Sequence[str | Path] = ()) -> tuple[PreparedRows, list[ds.Row]]:
    """The rows of a trained model's run, read again from the paths given, and its training rows; a
    ``ValueError`` unless they hash to the card's ``training_data.sha256`` (recut and the encoder build
    both start from a model's own rows, never from rows that merely look like them)."""
    prepared = prepare_rows(data, threshold_data, exclude_data)
    train = [prepared.rows[i] for i in prepared.train_idx]
    if ds.digest(train) != card["training_data"]["sha256"]:
        raise ValueError("the training paths given do not give the rows this model was trained on "
                         "(card training_data.sha256 differs): pass the train-intent --data, --threshold-data "
                         "and --exclude-data of its training run")
    return prepared, train


def thresholds_entry(th: Thresholds, tc: TrainConfig) -> dict:
    """The card's ``thresholds``: where the cuts sit and the objective they were chosen for."""
    return {
        "decision_p_complex": th.decision_p_complex,
        "decision_note": "baked into the ONNX bias: label = argmax of probs",
        "simple_min_confidence": th.simple_min_confidence,
        "routing_cut_p_complex": th.routing_cut_p_complex,
        "objective": _objective(tc),
        "split_recall": tc.split_recall,
        "chosen_on": th.chosen_on,
        "target_routing_recall": tc.target_routing_recall,
    }


def threshold_split_metrics(files: Sequence[str], rows: Sequence[ds.Row], p_raw: np.ndarray,
                            th: Thresholds) -> dict:
    """The card's ``metrics.threshold_split``: the routing figures on the split the cuts were chosen on."""
    shifted = shift(p_raw, th.decision_p_complex)
    return {"files": list(files), "routing": routing_report(rows, shifted, th.simple_min_confidence)}


def train_intent(
    data: Sequence[str | Path],
    out_dir: str | Path,
    tc: TrainConfig | None = None,
    fc: FeatureConfig | None = None,
    log=print,
    threshold_data: Sequence[str | Path] = (),
    phrases: Phrases | None = None,
    exclude_data: Sequence[str | Path] = (),
) -> dict:
    """Train on ``data`` (files or directories of JSONL), write ``intent.onnx`` and ``card.json`` to
    ``out_dir`` and return the card.

    ``threshold_data`` (files or directories, ``*_test.jsonl`` included) is a labelled split written apart
    from the training data: the routing cut is chosen on it, and any of its texts found in ``data`` are
    left out of training. Without it the cut comes from out-of-fold predictions on the training rows.
    ``exclude_data`` (the held-out evaluation set) is never used: its texts are dropped from the training
    rows and from the threshold split alike.
    """
    tc = tc or TrainConfig()
    fc = fc or FeatureConfig()
    phrases = phrases if phrases is not None else Phrases.load()
    prepared = prepare_rows(data, threshold_data, exclude_data)
    rows, held_rows, held_files, train_idx = prepared.rows, prepared.held_rows, prepared.held_files, prepared.train_idx
    report, overlap, n_excluded, use_dev = prepared.report, prepared.overlap, prepared.n_excluded, prepared.use_dev
    train = [rows[i] for i in train_idx]
    dev = [rows[i] for i in np.flatnonzero(~prepared.is_train)]
    log(
        f"read {report.rows} rows from {len(report.files)} files (skipped: {report.skipped_multi_turn} multi-turn, "
        f"{report.skipped_duplicates} duplicates, {report.skipped_bad} unreadable, {overlap} in the threshold "
        f"split, {n_excluded} in the held-out set); train {len(train)}, dev {len(dev)}, threshold split "
        f"{len(held_rows)} ({prepared.held_dropped} held-out texts dropped)"
    )
    if not train:
        raise ValueError("no training rows")

    design = _design(rows, fc, tc, phrases)
    train_labels = [r.label for r in train]

    oof = None
    if tc.out_of_fold or not held_rows:
        fold_of = np.asarray([_fold(rows[i], tc.folds) for i in train_idx])
        oof = np.zeros(train_idx.size)
        for k in range(tc.folds):
            held = fold_of == k
            if held.any() and len({rows[i].label for i in train_idx[~held]}) == 2:
                oof[held] = _p_complex(design, _fit(design, train_idx[~held], tc), train_idx[held])

    fitted = _fit(design, train_idx, tc)
    held_p = np.zeros(0)
    if held_rows:
        held_p = fitted.p_complex(feature_matrix([r.text for r in held_rows], fc))
        th = thresholds_on_split([r.label for r in held_rows], held_p, tc,
                                  ", ".join(Path(f).name for f in held_files))
    else:
        assert oof is not None
        th = thresholds_out_of_fold(train_labels, oof, tc)
    log(f"routing cut P(complex) >= {th.routing_cut_p_complex} (chosen on {th.chosen_on}): label cut "
        f"{th.decision_p_complex}, simple confidence >= {th.simple_min_confidence}")

    fitted = fitted.shifted(logit(th.decision_p_complex))
    data_digest = ds.digest(train)
    # the rows name the weights only with the format they are stored in: the hidden layer's int8 table says so
    stored = "-int8" if tc.model == "hidden-layer" else ""
    version = cut_version(f"{MODEL_VERSION_MAJOR}.{fc.version}.{data_digest[:12]}{stored}", th.routing_cut_p_complex)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fitted.export(out / MODEL_FILE, version)

    card = {
        "name": "edgecloud-intent",
        "version": version,
        "labels": list(LABELS),
        "features": fc.to_dict(),
        "model": {
            **({"type": "logistic_regression", "solver": "liblinear (dual)", "C": tc.c}
               if tc.model == "logistic" else
               {"type": "hidden_layer", "hidden_units": tc.hidden, "activation": "relu", "solver": "adam",
                "epochs": tc.epochs, "alpha": tc.alpha, "first_layer_dtype": "int8, one float16 scale a row"}),
            "seed": tc.seed,
            "augment_copies": tc.augment_copies,
            "augment_kinds": [KINDS[k % len(KINDS)] for k in range(tc.augment_copies)],
            "augment_phrases": phrases.sources(),
            "kiosk_weight": tc.kiosk_weight,
            "onnx_sha256": hashlib.sha256((out / MODEL_FILE).read_bytes()).hexdigest(),
        },
        "thresholds": thresholds_entry(th, tc),
        "training_data": {
            "sha256": data_digest,
            "rows": len(train),
            "files": [Path(f).name for f in report.files],
            "sources": dict(sorted(Counter(r.source for r in train).items())),
            "labels": dict(sorted(Counter(r.label for r in train).items())),
            "skipped_multi_turn": report.skipped_multi_turn,
            "skipped_duplicates": report.skipped_duplicates,
            "left_out_as_threshold_rows": overlap,
            "left_out_as_held_out_rows": n_excluded,
            "held_out_files": [Path(f).name for f in ds.expand_paths(exclude_data, include_test_files=True)]
            if exclude_data else [],
            "dev_rule": (f"sha256(normalised text)[:8] as int % 100 < {ds.DEV_PERCENT}" if use_dev
                         else "none: the threshold split is the dev set"),
        },
        "metrics": {},
    }
    # Written now so the dev metrics below come from loading the files exactly as the kiosk will.
    write_card(card, out)

    metrics: dict = {}
    if oof is not None:
        oof_shifted = shift(oof, th.decision_p_complex)
        metrics["out_of_fold"] = summarize(train_labels, ["complex" if p >= 0.5 else "simple" for p in oof_shifted])
        metrics["out_of_fold_routing"] = routing_recall(train_labels, oof_shifted, th.simple_min_confidence)
    if held_rows:
        metrics["threshold_split"] = threshold_split_metrics([Path(f).name for f in held_files], held_rows,
                                                             held_p, th)
        log(f"threshold split: {metrics['threshold_split']['routing']['all']}")
    if dev:
        clf = IntentClassifier.load(out, providers=["CPUExecutionProvider"])
        probs = [clf.predict_proba(r.text)["complex"] for r in dev]
        dev_pred = ["complex" if p >= 0.5 else "simple" for p in probs]
        metrics["dev"] = summarize([r.label for r in dev], dev_pred)
        metrics["dev_routing"] = routing_recall([r.label for r in dev], probs, th.simple_min_confidence)
        metrics["dev_per_language"] = _by_language(dev, dev_pred)
        log(
            f"dev: n={len(dev)} accuracy={metrics['dev']['accuracy']:.4f} "
            f"complex recall={metrics['dev']['per_label']['complex']['recall']:.4f}"
        )
    if tc.source_holdout:
        metrics["source_holdout"] = _source_holdout(rows, train_idx, design, tc, log)
    card["metrics"] = metrics
    write_card(card, out)
    log(f"wrote {out / MODEL_FILE} ({(out / MODEL_FILE).stat().st_size} bytes) and {out / CARD_FILE}")
    return card
