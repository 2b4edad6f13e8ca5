"""BM25 over the pack's facts, in process memory, with a coverage score that says "found" or not.

Why BM25 with precomputed weights: a fact's BM25 weight for a term does not depend on the query,
so it is computed once at load and a query is a handful of numpy scatter-adds over posting lists
(tens of microseconds for 10,000 chunks), with no server process and no model run. Dense vectors
(the semantic cache's MiniLM) are optional and blended in when switched on; they cost a model run
per question, so they are off the 2 ms path.

BM25 scores are not comparable across questions, so "is there evidence?" is answered by
*coverage*: the share of the question's informative weight (idf-weighted features) that the best
fact contains. Words the pack has never seen count against it at the highest idf, which is what
makes "Is there a bowling alley?" come out uncovered while "where's the loo" does not.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.knowledge_pack import Fact

from .text import Feature, Speller, document_features, query_features, surface_words

K1 = 1.2
B = 0.5  # facts are short and similar in length: length normalisation matters little


@dataclass(frozen=True)
class Passage:
    """A retrieved fact and why: its BM25 score and the share of the question it covers."""

    fact: Fact
    score: float
    coverage: float

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.fact.id, "lang": self.fact.lang, "score": round(self.score, 3),
                "coverage": round(self.coverage, 3), "text": self.fact.text}


def chunk_text(fact: Fact) -> str:
    """What is indexed: the id's words, the keywords and the text (the id names the topic too)."""
    return " ".join((fact.id.replace("-", " "), " ".join(fact.keywords), fact.text))


class KnowledgeIndex:
    """An immutable index of one pack's facts; build a new one to change it."""

    def __init__(self, facts: Sequence[Fact], embedder: Any | None = None) -> None:
        self.facts = list(facts)
        n = len(self.facts)
        started = time.perf_counter()
        docs = [Counter(document_features(chunk_text(f))) for f in self.facts]
        lengths = np.array([sum(d.values()) for d in docs], dtype=np.float32)
        avgdl = float(lengths.mean()) if n else 1.0
        df: Counter[str] = Counter()
        for doc in docs:
            df.update(doc.keys())
        self.vocab: dict[str, int] = {name: i for i, name in enumerate(sorted(df))}
        self.idf = np.array([math.log(1.0 + (n - df[name] + 0.5) / (df[name] + 0.5)) for name in sorted(df)],
                            dtype=np.float32)
        self.max_idf = float(math.log(1.0 + (n + 0.5) / 0.5)) if n else 1.0
        postings: list[list[tuple[int, float]]] = [[] for _ in self.vocab]
        self.doc_terms: list[frozenset[int]] = []
        for doc_id, doc in enumerate(docs):
            norm = K1 * (1.0 - B + B * float(lengths[doc_id]) / avgdl)
            terms = []
            for name, tf in doc.items():
                tid = self.vocab[name]
                terms.append(tid)
                postings[tid].append((doc_id, float(self.idf[tid]) * tf * (K1 + 1.0) / (tf + norm)))
            self.doc_terms.append(frozenset(terms))
        self._ids = [np.array([d for d, _ in p], dtype=np.int32) for p in postings]
        self._weights = [np.array([w for _, w in p], dtype=np.float32) for p in postings]
        words: Counter[str] = Counter()
        for fact in self.facts:
            words.update(set(surface_words(chunk_text(fact))))
        self.speller = Speller(dict(words))
        self.embedder = embedder
        self.vectors: np.ndarray | None = None
        if embedder is not None and n:
            self.vectors = np.asarray(embedder.embed([chunk_text(f) for f in self.facts]), dtype=np.float32)
        self.build_ms = (time.perf_counter() - started) * 1000.0

    def __len__(self) -> int:
        return len(self.facts)

    def _dense_useful(self, question: str) -> bool:
        """The shipped embedding model is English-only: Chinese comes out as [UNK] pieces."""
        share = getattr(self.embedder, "unknown_share", None)
        return share is None or share(question) <= 0.3

    def features(self, question: str) -> list[Feature]:
        return query_features(question, self.vocab, self.speller)

    def search(self, question: str, k: int = 3, dense_weight: float = 0.3) -> list[Passage]:
        """The ``k`` best facts, best first; coverage is of the question's informative weight."""
        n = len(self.facts)
        features = self.features(question)
        if not n or not features:
            return []
        scores = np.zeros(n, dtype=np.float32)
        query: list[tuple[int | None, float]] = []
        for feature in features:
            tid = self.vocab.get(feature.name)
            if tid is not None:
                scores[self._ids[tid]] += feature.weight * self._weights[tid]
                query.append((tid, feature.weight * float(self.idf[tid])))
            elif feature.counted:
                query.append((None, feature.weight * self.max_idf))
        if self.vectors is not None and self.embedder is not None and self._dense_useful(question):
            top_bm25 = float(scores.max())
            vector = np.asarray(self.embedder.embed([question])[0], dtype=np.float32)
            # Cosines blended on the BM25 scale so neither side decides alone.
            scores = scores + dense_weight * max(top_bm25, 1.0) * np.clip(self.vectors @ vector, 0.0, None)
        # A fact usually exists once per language: take a few more than k, keep each fact's best.
        wanted = min(n, 2 * k + 2)
        top = np.argpartition(-scores, wanted - 1)[:wanted] if n > wanted else np.arange(n)
        top = top[np.argsort(-scores[top], kind="stable")]
        total = sum(w for _, w in query) or 1.0
        out: list[Passage] = []
        seen: set[str] = set()
        for doc_id in top:
            score = float(scores[doc_id])
            fact = self.facts[doc_id]
            if score <= 0.0 or len(out) == k:
                break
            if fact.id in seen:
                continue
            seen.add(fact.id)
            terms = self.doc_terms[doc_id]
            covered = sum(w for tid, w in query if tid is not None and tid in terms)
            out.append(Passage(fact, score, covered / total))
        return out


__all__ = ["KnowledgeIndex", "Passage", "chunk_text"]
