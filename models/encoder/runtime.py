"""Score one request with the sentence encoder: the second stage of the intent router.

The n-gram classifier (``models/intent/runtime.py``) decides most requests in well under a millisecond but knows
no word it has not seen in training, so a request whose hard part is such a word (a drug, an ailment, a legal
term) scores like the trivia around it. ``multilingual-e5-small`` has seen those words. The router runs it only
on the requests the n-gram model is unsure of (its confidence under the card's ``band_confidence``), and combines
the two scores with the stack the card records:

    z = w_ngram * logit(P_ngram(complex)) + w_encoder * logit_encoder + bias

with both logits clipped to ±13.8 (P in [1e-6, 1 - 1e-6]), and P(complex) = sigmoid(z). ``bias`` is aligned so
that the stack's routing cut falls on the card's (``thresholds.simple_min_confidence``): one threshold serves
both stages, and an operator's ``[router] confidence_threshold`` moves both.

The model directory holds ``encoder.onnx`` (``models/encoder/export.py``) and ``encoder_vocab.json`` (the cut
vocabulary, ``models/encoder/unigram.py``); both are checked against the card's digests when loaded. The device
needs onnxruntime and numpy, nothing else.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from models.encoder.unigram import UnigramTokenizer

ENCODER_FILE = "encoder.onnx"
VOCAB_FILE = "encoder_vocab.json"
LOGIT_CLIP = math.log((1 - 1e-6) / 1e-6)  # the stack was fitted on probabilities clipped to [1e-6, 1 - 1e-6]


def clipped_logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def clipped_logits(p: np.ndarray) -> np.ndarray:
    """``clipped_logit`` of every element, for the benches that score arrays."""
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


@dataclass(frozen=True)
class Stack:
    """How the two stages' scores combine, and when the second one runs."""

    w_ngram: float
    w_encoder: float
    bias: float  # aligned: sigmoid(z) >= the card's routing cut exactly where the fitted stack reached its own cut
    band_confidence: float  # the encoder runs when the n-gram model's confidence in its label is below this

    def p_complex(self, p_ngram: float, encoder_logit: float) -> float:
        z = (self.w_ngram * clipped_logit(p_ngram)
             + self.w_encoder * max(-LOGIT_CLIP, min(LOGIT_CLIP, encoder_logit)) + self.bias)
        return 1.0 / (1.0 + math.exp(-z))

    @classmethod
    def from_card(cls, section: dict) -> Stack:
        stack = section["stack"]
        return cls(float(stack["w_ngram"]), float(stack["w_encoder"]), float(stack["bias"]),
                   float(section["band_confidence"]))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def encoder_threads() -> int:
    """Up to four cores: a 12-layer pass is mostly matrix products that split well; more cores only wait."""
    return max(1, min(4, os.cpu_count() or 1))


class EncoderScorer:
    """The encoder and its head on one text. Thread-safe (one onnxruntime session, ``run`` is reentrant)."""

    def __init__(self, session: ort.InferenceSession, tokenizer: UnigramTokenizer, section: dict) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._prefix = str(section.get("prefix", "query: "))
        self._max_tokens = int(section["max_tokens"])
        self.stack = Stack.from_card(section)

    @classmethod
    def load(cls, directory: Path, section: dict, providers: list[str]) -> EncoderScorer:
        """Load the files ``section`` (the card's ``encoder``) names; a digest that differs is a ``ValueError``."""
        model_path, vocab_path = directory / section["file"], directory / section["vocab_file"]
        for path, key in ((model_path, "onnx_sha256"), (vocab_path, "vocab_sha256")):
            if _sha256(path) != section[key]:
                raise ValueError(f"{path.name} does not match the card's {key}: a partial or mixed model update")
        tokenizer = UnigramTokenizer.from_json(json.loads(vocab_path.read_text(encoding="utf-8")))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = encoder_threads()
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        # No spinning: onnxruntime's pool threads otherwise busy-wait after each parallel section, and the encoder
        # runs beside the edge model's prefill (early start, edge/early_start.py) or just before it, on the same
        # cores. Measured with bench/early_start.py on two cores: the device's first token came later with
        # early start than without it while the pool spun, and a little sooner once it did not; the pass
        # alone is 15-30 % slower (route_overhead), a cost the early start hides.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # TensorRT would build an engine for minutes at the first load and takes none of the contrib ops;
        # CUDA runs all of them (a Jetson's GPU), the CPU otherwise.
        providers = [p for p in providers if p != "TensorrtExecutionProvider"] or ["CPUExecutionProvider"]
        try:
            session = ort.InferenceSession(str(model_path), sess_options=opts, providers=providers)
        except Exception:  # an accelerator provider that cannot take the contrib ops: the CPU can
            session = ort.InferenceSession(str(model_path), sess_options=opts, providers=["CPUExecutionProvider"])
        scorer = cls(session, tokenizer, section)
        scorer.logit("warm up")
        return scorer

    def ids(self, text: str) -> np.ndarray:
        return np.asarray(self._tokenizer.encode(self._prefix + text, self._max_tokens), np.int64)

    def embedding(self, text: str) -> np.ndarray:
        return self._session.run(["embedding"], {"input_ids": self.ids(text)})[0]

    def logit(self, text: str) -> float:
        return float(self._session.run(["logit"], {"input_ids": self.ids(text)})[0][0])
