"""Run the intent classifier on the kiosk: numpy + onnxruntime, nothing else.

The ONNX graph takes the sparse hashed features (``indices`` int64[N], ``values`` float32[N]) and returns
``probs`` float32[2] in the card's label order. Passing the sparse form keeps one request at a few hundred
numbers instead of a 262,144-wide dense row, which is what keeps the call well under a millisecond.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from models.encoder.runtime import EncoderScorer
from models.intent.features import FeatureConfig, featurize

DEFAULT_MODEL_DIR = Path(__file__).resolve().parent / "default"
MODEL_FILE = "intent.onnx"
CARD_FILE = "card.json"
SIMPLE = "simple"
COMPLEX = "complex"

# Preferred order. For a model this small the CPU is usually as fast as a GPU round trip, but the spec
# (and a Jetson with TensorRT) may want the accelerator; a provider that fails to build falls back to CPU.
_PREFERRED_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
_WARMUP_TEXTS = ("where is the restroom", "洗手间在哪里", "prove that sqrt(2) is irrational", "")


@dataclass(frozen=True)
class IntentResult:
    """One classification. ``confidence`` is the probability of ``label``."""

    label: str
    confidence: float
    probs: dict[str, float]
    latency_ms: float
    stage: str = "ngram"  # "encoder" when the second stage decided (``models/encoder/runtime.py``)
    # A first-stage result the n-gram model is unsure of (confidence under the card's band), from a model whose
    # encoder is loaded: ``second_stage`` decides it. False on every final result.
    needs_encoder: bool = False


def choose_providers(requested: list[str] | None = None) -> list[str]:
    """The execution providers to try, best first, limited to what this onnxruntime build has."""
    available = set(ort.get_available_providers())
    wanted = requested if requested else list(_PREFERRED_PROVIDERS)
    chosen = [p for p in wanted if p in available]
    if "CPUExecutionProvider" not in chosen:
        chosen.append("CPUExecutionProvider")
    return chosen


Run = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


def probs_runner(session: ort.InferenceSession, probe: dict[str, np.ndarray]) -> Run:
    """How this session computes ``probs`` for one feed.

    On a CPU-only session: the binding's own ``run`` (``session._sess``, onnxruntime's C++ session). The
    public ``InferenceSession.run`` around it checks the feed's names, OrtValue ownership and graph capture
    on every call and retries on a fall-back provider after an execution-provider failure; on a CPU-only
    session with this model's fixed two inputs none of that can apply, and it cost about 20 us of a kiosk
    decision's classifier call when the CPU caches are cold (``docs/intent.md``, *Latency*). The binding is
    private to onnxruntime, so it is used only if it answers ``probe`` with the public run's bytes; where it
    is not there, raises or differs (another onnxruntime), or the session has an accelerator provider (which
    may fail and fall back), the public ``run``.
    """
    public: Run = lambda feed: session.run(["probs"], feed)  # noqa: E731
    binding = getattr(session, "_sess", None)
    if session.get_providers() != ["CPUExecutionProvider"] or not callable(getattr(binding, "run", None)):
        return public
    fast: Run = lambda feed: binding.run(["probs"], feed, None)  # noqa: E731
    try:
        same = np.asarray(fast(probe)[0]).tobytes() == np.asarray(public(probe)[0]).tobytes()
    except Exception:  # a binding whose call changed: the public path, which the version supports
        return public
    return fast if same else public


def _session_options() -> ort.SessionOptions:
    opts = ort.SessionOptions()
    # One request is a gather over a few hundred weights: extra threads only add wake-up latency and
    # steal cores from llama.cpp on the kiosk.
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    return opts


class IntentClassifier:
    """A loaded intent model. Thread-safe: onnxruntime sessions allow concurrent ``run`` calls."""

    def __init__(self, session: ort.InferenceSession, card: dict, encoder: EncoderScorer | None = None) -> None:
        self._session = session
        self._card = card
        self._encoder = encoder
        self._features = FeatureConfig.from_dict(card["features"])
        self._labels: list[str] = list(card["labels"])
        if set(self._labels) != {SIMPLE, COMPLEX}:
            raise ValueError(f"model labels must be simple/complex, got {self._labels}")
        self._provider = session.get_providers()[0]
        idx, val = featurize(_WARMUP_TEXTS[0], self._features)
        self._run = probs_runner(session, {"indices": idx, "values": val})

    @classmethod
    def load(
        cls, model_dir: str | Path | None = None, providers: list[str] | None = None, encoder: bool = True
    ) -> IntentClassifier:
        """Load ``intent.onnx`` + ``card.json`` from ``model_dir`` (None = the model shipped in the package),
        pick the execution provider and warm the session so the first kiosk request is not the slow one.

        A card with an ``encoder`` section brings the second stage (``encoder.onnx``, ``encoder_vocab.json``)
        unless ``encoder`` is False: then the n-gram model decides alone, at its own card cut."""
        directory = Path(model_dir) if model_dir is not None else DEFAULT_MODEL_DIR
        card = json.loads((directory / CARD_FILE).read_text(encoding="utf-8"))
        model_bytes = (directory / MODEL_FILE).read_bytes()
        chosen = choose_providers(providers)
        try:
            session = ort.InferenceSession(model_bytes, sess_options=_session_options(), providers=chosen)
        except Exception:  # an accelerator provider that is listed but cannot initialise here
            if chosen == ["CPUExecutionProvider"]:
                raise
            session = ort.InferenceSession(
                model_bytes, sess_options=_session_options(), providers=["CPUExecutionProvider"]
            )
        scorer = None
        if encoder and card.get("encoder"):
            scorer = EncoderScorer.load(directory, card["encoder"], chosen)
        classifier = cls(session, card, scorer)
        classifier.warm()
        return classifier

    def warm(self, rounds: int = 3) -> None:
        """A few dummy runs: the first ``run`` of a session allocates buffers and is much slower."""
        for _ in range(rounds):
            for text in _WARMUP_TEXTS:
                self.classify(text)

    def predict_proba(self, text: str) -> dict[str, float]:
        """Label -> probability, without timing."""
        idx, val = featurize(text, self._features)
        (probs,) = self._run({"indices": idx, "values": val})
        return {label: float(p) for label, p in zip(self._labels, probs.tolist(), strict=True)}

    def classify(self, text: str) -> IntentResult:
        """Classify one request's text (the last user message; the policy handles multi-turn itself).

        With an encoder, a text the n-gram model is unsure of (confidence under the card's band) is scored
        again by the encoder and the two scores are stacked; the result says which stage decided."""
        first = self.first_stage(text)
        return self.second_stage(text, first) if first.needs_encoder else first

    def first_stage(self, text: str) -> IntentResult:
        """The n-gram model's result alone (well under a millisecond), with ``needs_encoder`` set where the
        second stage would decide. The gateway routes on it at once and runs ``second_stage`` off the event
        loop, so the fast path never waits for the encoder (``edge/pipeline.py``)."""
        start = time.perf_counter()
        probs = self.predict_proba(text)
        label = max(self._labels, key=lambda name: probs[name])
        encoder = self._encoder
        unsure = encoder is not None and probs[label] < encoder.stack.band_confidence
        return IntentResult(label=label, confidence=probs[label], probs=probs,
                            latency_ms=(time.perf_counter() - start) * 1000.0, needs_encoder=unsure)

    def second_stage(self, text: str, first: IntentResult) -> IntentResult:
        """The encoder's score stacked on ``first`` (this text's ``first_stage``): the final result, stage
        "encoder". Milliseconds of CPU: call it from a worker thread in a server."""
        encoder = self._encoder
        if encoder is None:
            raise RuntimeError("this classifier was loaded without its encoder stage")
        start = time.perf_counter()
        p = encoder.stack.p_complex(first.probs[COMPLEX], encoder.logit(text))
        probs = {SIMPLE: 1.0 - p, COMPLEX: p}
        label = max(self._labels, key=lambda name: probs[name])
        latency_ms = first.latency_ms + (time.perf_counter() - start) * 1000.0
        return IntentResult(label=label, confidence=probs[label], probs=probs, latency_ms=latency_ms,
                            stage="encoder")

    @property
    def card(self) -> dict:
        """The JSON model card (a copy: callers cannot change the loaded model's view of itself)."""
        return json.loads(json.dumps(self._card))

    @property
    def encoder(self) -> EncoderScorer | None:
        """The second stage, when the model has one and it was loaded."""
        return self._encoder

    @property
    def version(self) -> str:
        """The card's version; loaded without its encoder stage, the n-gram model's own (before the ``+``)."""
        version = str(self._card["version"])
        return version if self._encoder is not None or not self._card.get("encoder") else version.split("+")[0]

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def confidence_threshold(self) -> float:
        """Recommended minimum confidence for a ``simple`` label to stay on the edge (from the card)."""
        return float(self._card["thresholds"]["simple_min_confidence"])


__all__ = ["COMPLEX", "DEFAULT_MODEL_DIR", "SIMPLE", "IntentClassifier", "IntentResult", "choose_providers"]

