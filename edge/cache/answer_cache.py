"""The answer cache's public API: FAQ answers, exact repeats and (optionally) guarded paraphrases.

``AnswerCache`` is what the pipeline, the admin routes and the services see. It decides what may
be stored (``_refusal``), looks up FAQ first, then the exact key, then a semantic neighbour, and
loads FAQ packs. Its parts, one job each:
- ``edge.cache.stores``: the two diskcache stores on disk, reads without writes, batched access
  times, and recovery from a damaged database;
- ``edge.cache.semantic_sync``: the in-memory semantic index, kept in step with every process's rows;
- ``edge.cache.entries``: the row shapes and the ``CacheHit`` read back from them.

Every failure (full disk, corrupt row, locked or damaged database) is logged, counted and turned
into a miss or a skipped store: the cache may make a request faster, never make it fail.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import diskcache

from edge.cache.disk import CorruptEntry
from edge.cache.entries import (
    FAQ_CONTEXT,
    MAX_ANSWER_CHARS,
    VALUE_SCHEMA,
    CacheHit,
    answer_hit,
    checked_faq_row,
    faq_hit,
)
from edge.cache.keys import KeyParts, faq_key, key_parts, normalize_text
from edge.cache.policy import CachePolicy, decide_policy
from edge.cache.semantic_sync import SemanticSync, start_semantic
from edge.cache.stores import CacheCounts, CacheStores, matching_keys
from edge.config import CacheConfig
from edge.types import ChatRequest, Finish
from models.faq import FaqEntry, load_faq_pack

if TYPE_CHECKING:
    from edge.cache.semantic import SemanticIndex

log = logging.getLogger("edgecloud.cache")


class AnswerCache:
    """Persistent, process-safe answer cache; every public method is synchronous and cheap."""

    def __init__(self, config: CacheConfig, data_dir: Path) -> None:
        self._config = config
        self.directory = Path(config.directory) if config.directory else Path(data_dir) / "cache"
        self._fingerprint = ""
        self._knowledge = str(config.knowledge_version)
        self._faq_files: dict[str, Path] = {}  # source name -> file, reloaded after a recovery
        self._counts = CacheCounts()
        self._stores = CacheStores(config, self.directory, self._counts, self._error)
        self._semantic_sync: SemanticSync | None = None
        if config.enabled and config.semantic:
            self._semantic_sync = start_semantic(config, self._stores, self._counts, self._error)

    # The stores and the index, for the lookup below and for tests and benchmarks that reach in.
    @property
    def _answers(self) -> diskcache.Cache | None:
        return self._stores.answers

    @property
    def _faq(self) -> diskcache.Cache | None:
        return self._stores.faq

    @property
    def _semantic(self) -> SemanticIndex | None:
        """The ``SemanticIndex`` (None with semantic matching off)."""
        return self._semantic_sync.index if self._semantic_sync is not None else None

    # ------------------------------------------------------------------------ public API
    def set_fingerprint(self, fingerprint: str) -> None:
        """The answering models and versions; part of every key, so a model swap starts afresh."""
        self._fingerprint = fingerprint

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def knowledge_version(self) -> str:
        return self._knowledge

    def set_knowledge_version(self, version: str) -> None:
        """Bump the operator's knowledge version at run time: every older answer stops matching."""
        self._knowledge = str(version)

    @property
    def semantic_enabled(self) -> bool:
        """True when lookups may run the embedding model (milliseconds, not microseconds): the
        caller may then prefer to run ``lookup`` in a worker thread."""
        return self._semantic_sync is not None

    def policy(self, req: ChatRequest) -> CachePolicy:
        """What this request may do with the cache (headers, multi-turn, tools, temperature). Never raises."""
        try:
            return decide_policy(req, self._config)
        except Exception as exc:  # an odd request shape must not fail the request: leave the cache alone
            self._error("policy", exc)
            return CachePolicy(False, False, float(self._config.default_ttl_s), "error")

    def key_parts(self, req: ChatRequest) -> KeyParts:
        return key_parts(req, self._fingerprint, self._knowledge)

    def lookup(self, req: ChatRequest, policy: CachePolicy) -> CacheHit | None:
        """FAQ first, then the exact key, then (when on) a guarded semantic neighbour; never raises."""
        if not policy.read or self._answers is None:
            self._count("bypassed")
            return None
        try:
            parts = self.key_parts(req)
            if not parts.question:
                self._count("misses")
                return None
            hit = self._lookup_faq(parts.question)
            if hit is None:
                hit = self._lookup_exact(parts, policy)
            if hit is None and self._semantic_sync is not None:
                hit = self._semantic_sync.lookup(parts, policy)
        except Exception as exc:
            self._error("lookup", exc)
            self._count("misses")
            return None
        self._count("misses" if hit is None else "hits")
        if hit is not None:
            self._count(f"{hit.reason}_hits")
        return hit

    def peek(self, req: ChatRequest, policy: CachePolicy) -> CacheHit | None:
        """What ``lookup`` would return, with no side effect: no hit or miss counted and no LRU
        refresh, so a preview (``POST /v1/route``) never changes what the cache reports or evicts."""
        if not policy.read or self._answers is None:
            return None
        try:
            parts = self.key_parts(req)
            if not parts.question:
                return None
            hit = self._lookup_faq(parts.question)
            if hit is None:
                hit = self._lookup_exact(parts, policy, touch=False)
            if hit is None and self._semantic_sync is not None:
                hit = self._semantic_sync.lookup(parts, policy, touch=False)
        except Exception as exc:  # a preview reports a miss; the next real lookup counts and repairs
            log.warning("cache peek failed: %s: %s", type(exc).__name__, exc)
            return None
        return hit

    def store(
        self,
        req: ChatRequest,
        text: str,
        finish: Finish,
        *,
        route: str,
        model: str,
        policy: CachePolicy,
        degraded: bool = False,
        hedge_loser: bool = False,
    ) -> bool:
        """Remember a safe answer; returns whether it was stored. Never raises."""
        reason = self._refusal(req, text, finish, route, policy, degraded, hedge_loser)
        if reason is not None:
            self._count("skipped")
            self._count(f"skipped_{reason}")
            return False
        answers = self._answers
        if answers is None:
            self._count("skipped")
            return False
        try:
            parts = self.key_parts(req)
            now = time.time()
            value = {
                "v": VALUE_SCHEMA,
                "text": text,
                "finish_reason": finish.finish_reason,
                "usage": finish.usage.as_dict(),
                "model": model or finish.model,
                "route": route,
                "stored_at": now,
                "q": parts.question,
                "ctx": parts.context,
                "kv": self._knowledge,
            }
            vector = None
            if self._semantic_sync is not None:
                vector, value["e"] = self._semantic_sync.packed_vector(parts.question)
            # Culling happens inside set(): the hits read since the last flush count first.
            self._stores.flush_touches()
            answers.set(parts.key, value, expire=policy.ttl_s, tag=self._knowledge)
        except Exception as exc:
            self._error("store", exc)
            return False
        self._count("stores")
        if self._semantic_sync is not None:
            try:
                self._semantic_sync.index.add(parts.context, parts.key, parts.question, vector)
            except Exception as exc:
                self._error("semantic-add", exc)
        return True

    def load_faq(self, path: Path) -> int:
        """Load an FAQ pack file; returns the number of entries. Raises ``ValueError`` on a bad pack.

        A pack replaces the entries of an earlier pack with the same file name, so a bundle that
        ships a newer ``faq.json`` also removes the answers the operator dropped from it.
        """
        path = Path(path)
        count = self.load_faq_entries(load_faq_pack(path), source=path.name)
        self._faq_files[path.name] = path
        return count

    def load_faq_entries(self, entries: Iterable[FaqEntry], source: str) -> int:
        """Store validated FAQ entries under ``source`` (replacing that source's earlier entries)."""
        entries = list(entries)
        rows: dict[str, dict[str, Any]] = {}
        for entry in entries:
            for phrasing in entry.questions():
                question = normalize_text(phrasing)
                if not question:
                    raise ValueError(f"FAQ pack {source}: the question {phrasing!r} is empty once normalised")
                key = faq_key(question)
                previous = rows.get(key)
                if previous is not None and previous["answer"] != entry.answer:
                    raise ValueError(
                        f"FAQ pack {source}: {phrasing!r} is given two different answers "
                        f"(entries {previous['id']!r} and {entry.id!r})"
                    )
                rows[key] = {
                    "v": VALUE_SCHEMA, "answer": entry.answer, "q": question, "id": entry.id,
                    "lang": entry.lang, "source": source, "stored_at": time.time(),
                }
        vectors = self._semantic_sync.embed_rows(rows) if self._semantic_sync is not None else {}
        faq = self._faq
        if faq is None:
            raise ValueError("the answer cache is not available (disabled or its directory cannot be opened)")
        try:
            stale = [k for k in faq.iterkeys() if k not in rows and self._stores.faq_source(k) == source]
            with faq.transact():
                for key in stale:
                    faq.delete(key)
                for key, row in rows.items():
                    faq.set(key, row)
        except Exception as exc:
            self._error("load-faq", exc)
            raise ValueError(f"FAQ pack {source}: could not be written to the cache ({exc})") from exc
        if self._semantic_sync is not None:
            index = self._semantic_sync.index
            for key in stale:
                index.remove(FAQ_CONTEXT, key)
            for key, vector in vectors.items():
                index.add(FAQ_CONTEXT, key, rows[key]["q"], vector)
        log.info("loaded %d FAQ entries (%d phrasings) from %s", len(entries), len(rows), source)
        self._count("faq_loads")
        return len(entries)

    def stats(self) -> dict[str, Any]:
        """Entries and bytes (shared by every process on this directory) and this process's counters."""
        counts = self._counts.snapshot()
        hits = counts.get("hits", 0)
        misses = counts.get("misses", 0)
        out: dict[str, Any] = {
            "enabled": self._config.enabled and self._answers is not None,
            "directory": str(self.directory),
            "entries": 0,
            "faq_entries": 0,
            "bytes": 0,
            "size_limit_bytes": int(self._config.size_limit_bytes),
            "hits": hits,
            "misses": misses,
            "hit_ratio": round(hits / (hits + misses), 4) if hits + misses else 0.0,
            "exact_hits": counts.get("hit_hits", 0),
            "faq_hits": counts.get("faq_hits", 0),
            "semantic_hits": counts.get("semantic_hits", 0),
            "bypassed": counts.get("bypassed", 0),
            "stores": counts.get("stores", 0),
            "skipped": counts.get("skipped", 0),
            "errors": counts.get("errors", 0),
            "recoveries": counts.get("recoveries", 0),
            "knowledge_version": self._knowledge,
            "semantic": self._semantic_sync is not None,
            "semantic_entries": len(self._semantic_sync) if self._semantic_sync is not None else 0,
        }
        try:
            if self._answers is not None:
                out["entries"] = len(self._answers)
                out["bytes"] = int(self._answers.volume())
            if self._faq is not None:
                out["faq_entries"] = len(self._faq)
                out["bytes"] += int(self._faq.volume())
        except Exception as exc:
            self._error("stats", exc)
            out["errors"] = self._counts.snapshot().get("errors", 0)
        return out

    def purge(
        self, prefix: str | None = None, knowledge_version: str | None = None, *, faq: bool = False
    ) -> int:
        """Remove answers: all, those of one knowledge version, or those whose question or key starts
        with ``prefix`` (normalised like a question). ``faq=True`` also removes FAQ entries that match.
        Returns how many entries were removed.
        """
        answers = self._answers
        if answers is None:
            return 0
        removed = 0
        try:
            if prefix is None and knowledge_version is None:
                removed += answers.clear()
                if faq and self._faq is not None:
                    removed += self._faq.clear()
                if self._semantic_sync is not None:
                    self._semantic_sync.reset()
                return removed
            if prefix is None:
                return answers.evict(str(knowledge_version))
            norm = normalize_text(prefix)
            raw = prefix.strip().lower()

            def matches(key: str, value: Any) -> bool:
                if knowledge_version is not None and value.get("kv", knowledge_version) != knowledge_version:
                    return False
                question = value.get("q", "")
                return bool((norm and question.startswith(norm)) or (raw and key.startswith(raw)))

            stores = [answers] + ([self._faq] if faq and self._faq is not None else [])
            for store in stores:
                for key in matching_keys(store, matches):
                    if store.delete(key):
                        removed += 1
                        if self._semantic_sync is not None:
                            self._semantic_sync.index.remove_key(key)
        except Exception as exc:
            self._error("purge", exc)
        return removed

    def close(self) -> None:
        """Release the SQLite connections (at the end of the app's lifespan)."""
        self._stores.close()

    # ------------------------------------------------------------------------ internals
    def _lookup_faq(self, question: str) -> CacheHit | None:
        faq = self._stores.faq
        if faq is None:
            return None
        key = faq_key(question)
        value = self._stores.get(faq, key)
        if value is None:
            return None
        return faq_hit(key, checked_faq_row(value, question), "faq")

    def _lookup_exact(self, parts: KeyParts, policy: CachePolicy, touch: bool = True) -> CacheHit | None:
        answers = self._stores.answers
        if answers is None:
            return None
        value = self._stores.get(answers, parts.key, touch)
        if value is None:
            return None
        hit = answer_hit(parts.key, value, policy, "hit")
        if hit is not None and (value.get("q") != parts.question or value.get("ctx") != parts.context):
            raise CorruptEntry("a cached answer does not belong to the key it is stored under")
        return hit

    def _refusal(
        self, req: ChatRequest, text: str, finish: Finish, route: str, policy: CachePolicy,
        degraded: bool, hedge_loser: bool,
    ) -> str | None:
        if not policy.write:
            return "policy"
        if finish.finish_reason != "stop":
            return "finish"
        if degraded:
            return "degraded"
        if hedge_loser:
            return "hedge-loser"
        if route == "cache":
            return "from-cache"
        if req.is_multi_turn or req.has_tools or req.has_images or req.has_schema:
            return "request"
        if not text.strip() or len(text) > MAX_ANSWER_CHARS:
            return "size"
        return None

    def _count(self, name: str, n: int = 1) -> None:
        self._counts.add(name, n)

    def _error(self, where: str, exc: BaseException) -> None:
        """Count and log a failure; after a damaged database, reload what lived in it."""
        self._count("errors")
        self._count(f"errors_{where}")
        log.warning("cache %s failed: %s: %s", where, type(exc).__name__, exc)
        if not self._stores.recover_if_damaged(exc):
            return
        if self._semantic_sync is not None:
            self._semantic_sync.reset()
        # The operator's FAQ packs were in the damaged database too: load the files again, so the
        # mall's opening hours do not wait for a restart. (Packs uploaded as a body are gone.)
        for path in list(self._faq_files.values()):
            try:
                self.load_faq(path)
            except Exception as reload_exc:
                log.error("FAQ pack %s not reloaded after the cache recovery: %s", path, reload_exc)


__all__ = ["AnswerCache", "CacheHit"]
