"""Train the intent classifier and export it to ONNX with its model card (needs the ``train`` extra).

Model: L2-regularised logistic regression on the hashed features of ``features.py``. Why linear: on a few
thousand rows a linear model over character n-grams generalises as well as anything small, trains in
seconds, is deterministic (liblinear with a fixed seed), and exports to a six-node ONNX graph
(Gather, Mul, ReduceSum, Add, Mul, Softmax) whose run time is dominated by feature hashing, not the model.

Reproducibility: rows are sorted by a content key, each row's augmentation uses its own
``random.Random(f"{seed}:{content key}")``, folds and the dev split are content hashes, liblinear gets
``random_state=seed``, and neither the ONNX file nor the card contains a timestamp or an absolute path.
The same data and seed give byte-identical ``intent.onnx`` and ``card.json``.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from scipy import sparse
from sklearn.linear_model import LogisticRegression

from models.intent import dataset as ds
from models.intent.features import FeatureConfig, featurize
from models.intent.metrics import routing_recall, summarize
from models.intent.runtime import CARD_FILE, MODEL_FILE, IntentClassifier

LABELS = ("simple", "complex")
MODEL_VERSION_MAJOR = 1
KIOSK_SOURCE_PREFIX = "kiosk"


@dataclass(frozen=True)
class TrainConfig:
    """Knobs of one training run; all of them are written to the card."""

    seed: int = 13
    c: float = 4.0
    augment_copies: int = 2
    kiosk_weight: float = 12.0
    folds: int = 5
    target_complex_recall: float = 0.985  # for the label itself, chosen on out-of-fold predictions
    target_routing_recall: float = 0.995  # with the recommended simple-confidence threshold
    source_holdout: bool = True


# ---------------------------------------------------------------------------------------------- augmentation
_PREFIX_EN = ("", "", "hi ", "hello, ", "excuse me, ", "sorry, ", "hey ", "quick question: ", "um ")
_SUFFIX_EN = ("", "", " please", " thanks", " thank you", " asap")
_PREFIX_ZH = ("", "", "请问", "你好，", "您好，请问", "麻烦问一下，", "打扰一下，", "hi，")
_SUFFIX_ZH = ("", "", "谢谢", "，谢谢", "呢", "啊", "呀")
# Label-neutral chatter a visitor puts before the actual request. Every long row in the shared data is
# `complex`, so without this the model learns "long = complex" and sends long-winded easy questions to
# the cloud. Added to both labels alike, it teaches that a story around the request is not difficulty.
_PREAMBLE_EN = (
    "I've been walking around here for a while and I'm a bit confused, ",
    "My friend said I should ask this machine, so here goes: ",
    "Sorry, I'm in a bit of a hurry because my family is waiting outside, ",
    "I'm not from around here and my phone battery is almost dead, ",
    "I asked someone at the counter earlier but they were busy, so ",
    "This is my first time using one of these screens, hope I'm doing it right, ",
    "We just got here after a long day of travelling and we're pretty tired, ",
    "My colleague is waiting for me and I only have a few minutes, ",
    "Okay, so I have a question and I'm not sure if this is the right place to ask it, ",
    "Hi, I came here with my kids this afternoon and something came up, ",
    "I tried looking it up on my phone but the signal in here is terrible, ",
    "My English is not perfect so sorry for the mistakes, ",
)
_PREAMBLE_ZH = (
    "我在这里转了半天有点晕，",
    "朋友说可以问这台机器，所以我来试试，",
    "不好意思我有点赶时间，家里人在外面等我，",
    "我不是本地人，手机也快没电了，",
    "刚才问了柜台但是他们太忙了，所以",
    "我第一次用这种屏幕，不知道对不对，",
    "我们坐了一天的车刚到，挺累的，",
    "同事还在等我，我就几分钟时间，",
    "嗯，我有个问题，不知道在这里问合不合适，",
    "我今天下午带孩子过来，遇到点事，",
    "我想用手机查一下，可是这里信号太差了，",
    "我普通话说得不太好，见谅，",
)


def _typo(word: str, rng: random.Random) -> str:
    if len(word) < 4 or not word.isalpha():
        return word
    i = rng.randrange(1, len(word) - 1)
    kind = rng.randrange(3)
    if kind == 0:
        return word[: i - 1] + word[i] + word[i - 1] + word[i + 1 :]
    if kind == 1:
        return word[:i] + word[i + 1 :]
    return word[:i] + word[i] + word[i:]


def augment(text: str, lang: str, rng: random.Random) -> str:
    """A style variant of ``text``: a few typos, a story before the request, greeting/thanks wrappers.

    Applied to both labels alike, so none of them carries label signal; case and '?' need no augmentation
    because the features never see them.
    """
    words = text.split(" ")
    if len(words) > 1 and rng.random() < 0.6:
        for _ in range(rng.randint(1, 2)):
            j = rng.randrange(len(words))
            words[j] = _typo(words[j], rng)
        text = " ".join(words)
    zh = lang == "zh"
    if rng.random() < 0.5:
        text = rng.choice(_PREAMBLE_ZH if zh else _PREAMBLE_EN) + text
    if zh:
        return rng.choice(_PREFIX_ZH) + text + rng.choice(_SUFFIX_ZH)
    return rng.choice(_PREFIX_EN) + text + rng.choice(_SUFFIX_EN)


# ---------------------------------------------------------------------------------------------- fitting
def _matrix(texts: Sequence[str], fc: FeatureConfig) -> sparse.csr_matrix:
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


def _design(rows: Sequence[ds.Row], fc: FeatureConfig, tc: TrainConfig) -> _Design:
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
        variants = [row.text] + [augment(row.text, row.lang, rng) for _ in range(tc.augment_copies)]
        for text in variants:
            texts.append(text)
            y.append(target)
            w.append(base)
            owner.append(i)
    return _Design(
        x=_matrix(texts, fc),
        y=np.asarray(y, dtype=np.int64),
        weight=np.asarray(w, dtype=np.float64),
        owner=np.asarray(owner, dtype=np.int64),
        original=np.asarray(original, dtype=np.int64),
    )


def _fit(design: _Design, row_idx: np.ndarray, tc: TrainConfig) -> tuple[np.ndarray, float]:
    """Fit on the given rows (with their augmented copies); classes balanced by sample weight."""
    mask = np.isin(design.owner, row_idx)
    y = design.y[mask]
    if len(np.unique(y)) < 2:
        raise ValueError("training data must contain both simple and complex rows")
    w = design.weight[mask].copy()
    for cls in (0, 1):
        sel = y == cls
        w[sel] *= w.sum() / (2.0 * w[sel].sum())
    # Dual coordinate descent: far fewer rows than hash slots, so it is ~100x faster than the primal
    # solver here and reaches the same optimum.
    model = LogisticRegression(C=tc.c, solver="liblinear", dual=True, random_state=tc.seed, max_iter=1000)
    model.fit(design.x[mask], y, sample_weight=w)
    return model.coef_[0].astype(np.float32), float(model.intercept_[0])


def _p_complex(design: _Design, weights: np.ndarray, bias: float, row_idx: np.ndarray) -> np.ndarray:
    z = design.x[design.original[row_idx]] @ weights.astype(np.float64) + bias
    return 1.0 / (1.0 + np.exp(-z))


def _fold(row: ds.Row, folds: int) -> int:
    return int(ds.text_key(row.text)[8:16], 16) % folds


def _choose_thresholds(y_true: list[str], p: np.ndarray, tc: TrainConfig) -> tuple[float, float]:
    """(decision threshold on P(complex), recommended minimum confidence for a simple label).

    Recall is counted per row, unweighted. (Weighting it like training, kiosk rows 12x, was tried: the
    few hand-written complex rows that are hard out-of-fold then dominate and drive the threshold to 0.03.)
    """
    t = np.asarray([label == "complex" for label in y_true])
    if not t.any():
        return 0.5, 0.5

    def recall(cloud: np.ndarray) -> float:
        return float(cloud[t].mean())

    # Largest threshold (<= 0.5: never trade recall for precision) keeping complex recall at target.
    tau = 0.02
    for cand in np.round(np.arange(0.5, 0.019, -0.01), 2):
        if recall(p >= cand) >= tc.target_complex_recall:
            tau = float(cand)
            break
    shifted = _shift(p, tau)
    conf = 0.99
    for cand in np.round(np.arange(0.5, 1.0, 0.01), 2):
        if recall((shifted >= 0.5) | ((1.0 - shifted) < cand)) >= tc.target_routing_recall:
            conf = float(cand)
            break
    return tau, conf


def _shift(p: np.ndarray, tau: float) -> np.ndarray:
    """Probabilities after moving the decision point from ``tau`` to 0.5 (what the baked bias does)."""
    z = np.log(np.clip(p, 1e-12, 1 - 1e-12) / np.clip(1 - p, 1e-12, 1))
    return 1.0 / (1.0 + np.exp(-(z - _logit(tau))))


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


# ---------------------------------------------------------------------------------------------- export
def export_onnx(weights: np.ndarray, bias: float, path: Path, version: str) -> None:
    """Write the sparse-input logistic regression as an ONNX graph (opset 17, IR 8 for older runtimes)."""
    inits = [
        numpy_helper.from_array(weights.astype(np.float32), "weights"),
        numpy_helper.from_array(np.asarray(bias, dtype=np.float32), "bias"),
        numpy_helper.from_array(np.asarray([-0.5, 0.5], dtype=np.float32), "pair_sign"),
    ]
    nodes = [
        helper.make_node("Gather", ["weights", "indices"], ["w_sel"], axis=0),
        helper.make_node("Mul", ["w_sel", "values"], ["contrib"]),
        helper.make_node("ReduceSum", ["contrib"], ["dot"], keepdims=0),
        helper.make_node("Add", ["dot", "bias"], ["logit"]),
        # softmax([-z/2, z/2]) == [sigmoid(-z), sigmoid(z)]: probabilities of (simple, complex).
        helper.make_node("Mul", ["logit", "pair_sign"], ["pair"]),
        helper.make_node("Softmax", ["pair"], ["probs"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "edgecloud_intent",
        [
            helper.make_tensor_value_info("indices", TensorProto.INT64, ["n"]),
            helper.make_tensor_value_info("values", TensorProto.FLOAT, ["n"]),
        ],
        [
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("logit", TensorProto.FLOAT, []),
        ],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="edgecloud")
    model.ir_version = 8
    helper.set_model_props(model, {"version": version, "labels": ",".join(LABELS)})
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())


# ---------------------------------------------------------------------------------------------- driver
def _by_language(rows: Sequence[ds.Row], pred: Sequence[str]) -> dict:
    out = {}
    for lang in sorted({r.lang for r in rows}):
        sel = [i for i, r in enumerate(rows) if r.lang == lang]
        out[lang] = summarize([rows[i].label for i in sel], [pred[i] for i in sel])
    return out


def _source_holdout(rows: list[ds.Row], train_idx: np.ndarray, design: _Design, tc: TrainConfig, log) -> dict:
    """Train without one whole shared source, test on all of that source's rows: does the model know
    the request's difficulty, or only the source's style?"""
    result = {}
    train_set = set(train_idx.tolist())
    for source in sorted({r.source for r in rows if not r.source.startswith(KIOSK_SOURCE_PREFIX)}):
        held = np.asarray([i for i, r in enumerate(rows) if r.source == source], dtype=np.int64)
        rest = np.asarray([i for i in sorted(train_set) if rows[i].source != source], dtype=np.int64)
        if held.size < 20 or len({rows[i].label for i in rest}) < 2:
            continue
        w, b = _fit(design, rest, tc)
        p = _p_complex(design, w, b, held)
        pred = ["complex" if x >= 0.5 else "simple" for x in p]
        m = summarize([rows[i].label for i in held], pred)
        result[source] = {
            "n": m["n"],
            "labels": dict(Counter(rows[i].label for i in held)),
            "accuracy": m["accuracy"],
        }
        log(f"  source hold-out {source:<20} n={m['n']:<5} accuracy={m['accuracy']:.4f}")
    return result


def _write_card(card: dict, out: Path) -> None:
    text = json.dumps(card, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
    (out / CARD_FILE).write_text(text, encoding="utf-8")


def train_intent(
    data: Sequence[str | Path],
    out_dir: str | Path,
    tc: TrainConfig | None = None,
    fc: FeatureConfig | None = None,
    log=print,
) -> dict:
    """Train on ``data`` (files or directories of JSONL), write ``intent.onnx`` and ``card.json`` to
    ``out_dir`` and return the card."""
    tc = tc or TrainConfig()
    fc = fc or FeatureConfig()
    files = ds.expand_paths(data)
    rows, report = ds.load_rows(files)
    rows.sort(key=lambda r: ds.text_key(r.text))
    is_train = np.asarray([not ds.is_dev(r.text) for r in rows], dtype=bool)
    train_idx = np.flatnonzero(is_train)
    train = [rows[i] for i in train_idx]
    dev = [rows[i] for i in np.flatnonzero(~is_train)]
    log(
        f"read {report.rows} rows from {len(files)} files (skipped: {report.skipped_multi_turn} multi-turn, "
        f"{report.skipped_duplicates} duplicates, {report.skipped_bad} unreadable); "
        f"train {len(train)}, dev {len(dev)}"
    )
    if not train:
        raise ValueError("no training rows")

    design = _design(rows, fc, tc)

    # Out-of-fold predictions on the training rows choose the thresholds; dev stays untouched for reporting.
    fold_of = np.asarray([_fold(rows[i], tc.folds) for i in train_idx])
    oof = np.zeros(train_idx.size)
    for k in range(tc.folds):
        held = fold_of == k
        if held.any() and len({rows[i].label for i in train_idx[~held]}) == 2:
            w, b = _fit(design, train_idx[~held], tc)
            oof[held] = _p_complex(design, w, b, train_idx[held])
    train_labels = [r.label for r in train]
    tau, conf = _choose_thresholds(train_labels, oof, tc)
    oof_shifted = _shift(oof, tau)
    log(f"thresholds from {tc.folds}-fold out-of-fold predictions: P(complex) >= {tau}, "
        f"simple confidence >= {conf}")

    weights, bias = _fit(design, train_idx, tc)
    bias -= _logit(tau)
    data_digest = ds.digest(train)
    version = f"{MODEL_VERSION_MAJOR}.{fc.version}.{data_digest[:12]}"

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    export_onnx(weights, bias, out / MODEL_FILE, version)

    card = {
        "name": "edgecloud-intent",
        "version": version,
        "labels": list(LABELS),
        "features": fc.to_dict(),
        "model": {
            "type": "logistic_regression",
            "solver": "liblinear (dual)",
            "C": tc.c,
            "seed": tc.seed,
            "augment_copies": tc.augment_copies,
            "kiosk_weight": tc.kiosk_weight,
            "onnx_sha256": hashlib.sha256((out / MODEL_FILE).read_bytes()).hexdigest(),
        },
        "thresholds": {
            "decision_p_complex": tau,
            "decision_note": "baked into the ONNX bias: label = argmax of probs",
            "simple_min_confidence": conf,
            "target_complex_recall": tc.target_complex_recall,
            "target_routing_recall": tc.target_routing_recall,
        },
        "training_data": {
            "sha256": data_digest,
            "rows": len(train),
            "files": [Path(f).name for f in report.files],
            "sources": dict(sorted(Counter(r.source for r in train).items())),
            "labels": dict(sorted(Counter(r.label for r in train).items())),
            "skipped_multi_turn": report.skipped_multi_turn,
            "skipped_duplicates": report.skipped_duplicates,
            "dev_rule": f"sha256(normalised text)[:8] as int % 100 < {ds.DEV_PERCENT}",
        },
        "metrics": {},
    }
    # Written now so the dev metrics below come from loading the files exactly as the kiosk will.
    _write_card(card, out)

    oof_pred = ["complex" if p >= 0.5 else "simple" for p in oof_shifted]
    metrics: dict = {
        "out_of_fold": summarize(train_labels, oof_pred),
        "out_of_fold_routing": routing_recall(train_labels, oof_shifted, conf),
    }
    if dev:
        clf = IntentClassifier.load(out, providers=["CPUExecutionProvider"])
        probs = [clf.predict_proba(r.text)["complex"] for r in dev]
        dev_pred = ["complex" if p >= 0.5 else "simple" for p in probs]
        metrics["dev"] = summarize([r.label for r in dev], dev_pred)
        metrics["dev_routing"] = routing_recall([r.label for r in dev], probs, conf)
        metrics["dev_per_language"] = _by_language(dev, dev_pred)
        log(
            f"dev: n={len(dev)} accuracy={metrics['dev']['accuracy']:.4f} "
            f"complex recall={metrics['dev']['per_label']['complex']['recall']:.4f}"
        )
    if tc.source_holdout:
        metrics["source_holdout"] = _source_holdout(rows, train_idx, design, tc, log)
    card["metrics"] = metrics
    _write_card(card, out)
    log(f"wrote {out / MODEL_FILE} ({(out / MODEL_FILE).stat().st_size} bytes) and {out / CARD_FILE}")
    return card
