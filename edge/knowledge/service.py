"""The gateway's venue knowledge: the active pack, its index, evidence per question, and counters.

One ``KnowledgeBase`` per app (built in the lifespan). Loading a pack validates and indexes it
completely before it replaces the active one in a single assignment, so a bad pack is refused
with the old one still answering, and a request never sees half a pack. Activation also moves the
answer cache to the pack's knowledge version (answers grounded in the old facts stop matching and
are evicted) and loads the pack's FAQ entries.

The uncovered-question list is the operator's to-do list: venue questions nothing answered,
folded (case, punctuation) and scrubbed of digits, e-mail addresses and links, and shown only once
asked ``uncovered_min_count`` times, so a one-off question with a name or a number in it never
reaches the dashboard.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.config import KnowledgeConfig
from models.knowledge_pack import KnowledgePack, load_knowledge_pack, parse_knowledge_pack

from .grounding import DEFAULT_REFUSAL, Evidence, question_language
from .index import KnowledgeIndex
from .venue import VenueDetector

log = logging.getLogger("edgecloud.knowledge")

MAX_UNCOVERED = 2_000  # distinct questions remembered; the rarest are dropped first
_EMAIL = re.compile(r"\S+@\S+")
_LINK = re.compile(r"https?://\S+|www\.\S+", re.IGNORECASE)
_DIGITS = re.compile(r"\d[\d\s\-]{2,}\d|\d{3,}")
_SPACES = re.compile(r"\s+")


def scrub_question(text: str) -> str:
    """A question as the to-do list shows it: no e-mail, link or long number, at most 120 characters."""
    text = _LINK.sub("<link>", _EMAIL.sub("<email>", text))
    text = _DIGITS.sub("#", text)
    return _SPACES.sub(" ", text).strip().lower()[:120]


@dataclass(frozen=True)
class ActivePack:
    pack: KnowledgePack
    index: KnowledgeIndex
    loaded_at: float
    knowledge_version: str


class KnowledgeBase:
    """Thread-safe: searches read one immutable ``ActivePack``; loads swap it whole."""

    def __init__(self, config: KnowledgeConfig, cache: Any | None = None, base_version: str = "1",
                 registry: Any | None = None) -> None:
        self.config = config
        self.cache = cache
        self.base_version = base_version
        self.venue = VenueDetector(config.venue_terms)
        self._active: ActivePack | None = None
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._uncovered: Counter[str] = Counter()
        self._embedder: Any | None = None
        self.last_error: str | None = None
        self._metrics = _Metrics(registry, self) if registry is not None else None

    # ----- loading ----------------------------------------------------------------------------
    @property
    def active(self) -> ActivePack | None:
        return self._active

    def load_path(self, path: Path) -> ActivePack:
        """Validate, index and activate a pack file; ``ValueError`` (old pack kept) if it is bad."""
        return self.activate(load_knowledge_pack(Path(path)))

    def load_bytes(self, data: bytes, kind: str, source: str) -> ActivePack:
        return self.activate(parse_knowledge_pack(data, kind, source=source))

    def activate(self, pack: KnowledgePack) -> ActivePack:
        embedder = self._dense_embedder()
        index = KnowledgeIndex(pack.facts, embedder=embedder)
        version = f"{self.base_version}+{pack.version}"
        with self._lock:
            previous = self._active
            active = ActivePack(pack, index, time.time(), version)
            self._active = active
            self._uncovered.clear()  # the to-do list was about the old facts
        self.last_error = None
        log.info("knowledge pack %s active: %d facts (%s), index built in %.0f ms", pack.version,
                 len(pack.facts), ",".join(pack.languages), index.build_ms)
        self._apply_to_cache(pack, version, previous)
        return active

    def _dense_embedder(self) -> Any | None:
        if not self.config.dense:
            return None
        if self._embedder is None:
            try:
                from edge.cache.semantic import Embedder

                self._embedder = Embedder()
            except Exception as exc:  # the optional model is missing: lexical retrieval still works
                log.error("dense knowledge retrieval is on but the embedding model cannot load (%s)", exc)
                return None
        return self._embedder

    def _apply_to_cache(self, pack: KnowledgePack, version: str, previous: ActivePack | None) -> None:
        cache = self.cache
        if cache is None:
            return
        old_version = cache.knowledge_version
        cache.set_knowledge_version(version)
        if old_version != version:
            try:  # answers built on the old facts can never match again: free their space now
                removed = cache.purge(None, old_version)
                log.info("knowledge version %s -> %s: %s cached answers evicted", old_version, version, removed)
            except Exception as exc:
                log.error("evicting answers of knowledge version %s failed: %s", old_version, exc)
        entries = pack.faq_entries()
        if entries:
            try:
                cache.load_faq_entries(entries, f"knowledge:{pack.name}")
            except Exception as exc:
                log.error("the FAQ entries of knowledge pack %s were not loaded: %s", pack.version, exc)

    # ----- questions --------------------------------------------------------------------------
    @property
    def dense_enabled(self) -> bool:
        """``evidence`` blends in embedding cosines (tens of ms): callers on the loop use a thread."""
        return self.config.dense

    @property
    def max_prompt_tokens(self) -> int:
        """The grounding block's budget in a backend's prompt."""
        return self.config.max_prompt_tokens

    def evidence(self, question: str) -> Evidence | None:
        """What the active pack says about a question; None when no pack is loaded (or it is off)."""
        active = self._active
        if active is None or not self.config.enabled or not question.strip():
            return None
        config = self.config
        started = time.perf_counter()
        found = tuple(active.index.search(question, config.top_k))
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        top = found[0].coverage if found else 0.0
        strength = "strong" if top >= config.strong_coverage else "weak" if top >= config.min_coverage else "none"
        venue = strength != "none" or self.venue.looks_like_venue_question(question)
        grounding = tuple(p for p in found if p.coverage >= config.min_coverage) if strength != "none" else ()
        lang = question_language(question)
        evidence = Evidence(
            venue=venue, strength=strength, found=found, mode=config.mode, pack_version=active.pack.version,
            lang=lang, refusal=self.refusal(lang), retrieval_ms=elapsed_ms, grounding=grounding,
        )
        self._count(evidence, question)
        return evidence

    def refusal(self, lang: str) -> str:
        """The operator's "ask staff" wording: settings, then the pack, then the built-in text."""
        active = self._active
        pack_refusal = active.pack.refusal if active is not None else {}
        for table in (self.config.refusal, pack_refusal, DEFAULT_REFUSAL):
            if lang in table:
                return table[lang]
        for table in (self.config.refusal, pack_refusal):
            if table:
                return next(iter(table.values()))
        return DEFAULT_REFUSAL["en"]

    def search(self, question: str, k: int | None = None) -> list[dict[str, Any]]:
        active = self._active
        if active is None:
            return []
        return [p.as_dict() for p in active.index.search(question, k or self.config.top_k)]

    # ----- counters -----------------------------------------------------------------------------
    def _count(self, evidence: Evidence, question: str) -> None:
        result = evidence.strength if evidence.venue else "not-venue"
        with self._lock:
            self._counts[result] += 1
            if evidence.venue and evidence.strength == "none":
                self._uncovered[scrub_question(question)] += 1
                if len(self._uncovered) > MAX_UNCOVERED:
                    for key, _ in self._uncovered.most_common()[-(MAX_UNCOVERED // 10):]:
                        del self._uncovered[key]
        if self._metrics is not None:
            self._metrics.observe(result, evidence.retrieval_ms / 1000.0)

    def hit_ratio(self) -> float:
        with self._lock:
            hits = self._counts["strong"] + self._counts["weak"]
            total = hits + self._counts["none"]
        return hits / total if total else 0.0

    def uncovered(self, limit: int = 20) -> list[dict[str, Any]]:
        with self._lock:
            top = self._uncovered.most_common()
        return [{"question": q, "count": n} for q, n in top if n >= self.config.uncovered_min_count][:limit]

    def status(self) -> dict[str, Any]:
        active = self._active
        with self._lock:
            counts = dict(self._counts)
        out: dict[str, Any] = {
            "enabled": self.config.enabled,
            "mode": self.config.mode,
            "loaded": active is not None,
            "lookups": counts,
            "hit_ratio": round(self.hit_ratio(), 4),
            "uncovered": self.uncovered(),
            "last_error": self.last_error,
        }
        if active is not None:
            pack = active.pack
            out.update({
                "name": pack.name, "version": pack.pack_version, "pack_version": pack.version,
                "knowledge_version": active.knowledge_version, "facts": len(pack.facts),
                "languages": pack.languages, "faq_entries": len(pack.faq_entries()),
                "loaded_at": active.loaded_at, "index_ms": round(active.index.build_ms, 1),
                "dense": active.index.vectors is not None,
            })
        return out


class _Metrics:
    """Prometheus series: lookups by result, retrieval latency, hit ratio, the active pack."""

    def __init__(self, registry: Any, base: KnowledgeBase) -> None:
        from prometheus_client import Counter as PCounter
        from prometheus_client import Gauge, Histogram

        self.lookups = PCounter("edgecloud_knowledge_lookups", "Knowledge retrievals by result "
                                "(strong, weak, none: venue questions; not-venue).", ["result"], registry=registry)
        self.latency = Histogram(
            "edgecloud_knowledge_retrieval_seconds", "Time to retrieve a question's passages.",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1), registry=registry,
        )
        hit = Gauge("edgecloud_knowledge_hit_ratio", "Share of venue questions with evidence since start.",
                    registry=registry)
        hit.set_function(base.hit_ratio)
        facts = Gauge("edgecloud_knowledge_facts", "Facts (chunks) in the active knowledge pack.", registry=registry)
        facts.set_function(lambda: len(base.active.pack.facts) if base.active is not None else 0)
        for result in ("strong", "weak", "none", "not-venue"):
            self.lookups.labels(result)

    def observe(self, result: str, seconds: float) -> None:
        self.lookups.labels(result).inc()
        self.latency.observe(seconds)


__all__ = ["ActivePack", "KnowledgeBase", "scrub_question"]
