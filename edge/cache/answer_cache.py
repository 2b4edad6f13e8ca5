"""The answer cache: FAQ answers, exact repeats and (optionally) guarded paraphrases, on disk.

Why this shape:
- diskcache (SQLite + files) in the device's data directory survives restarts and is safe when
  several gateway processes share it; values go through ``JSONDisk``, never pickle.
- Two stores: ``answers/`` holds model answers with a TTL and least-recently-used eviction under a
  byte limit; ``faq/`` holds the operator's FAQ answers, never evicted (losing the mall's opening
  hours to LRU pressure would send the question to a model that does not know them).
- Every failure (full disk, corrupt row, locked or damaged database) is logged, counted and turned
  into a miss or a skipped store: the cache may make a request faster, never make it fail.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import diskcache

from edge.cache import diskcache_private as dc
from edge.cache.disk import CorruptEntry, JSONDisk
from edge.cache.keys import KeyParts, faq_key, key_parts, normalize_text
from edge.cache.policy import CachePolicy, decide_policy
from edge.config import CacheConfig
from edge.types import ChatRequest, Finish, Usage
from models.faq import FaqEntry, load_faq_pack

log = logging.getLogger("edgecloud.cache")

VALUE_SCHEMA = 1
MAX_ANSWER_CHARS = 64 * 1024  # longer answers are rare and not worth the disk they take
FAQ_CONTEXT = "faq"
# SQLite busy timeout: a lookup waits at most this long for another process's write.
SQLITE_TIMEOUT_S = 1.0
# Access times of hits are written in batches: at most this often, or every this many hits.
TOUCH_INTERVAL_S = 1.0
TOUCH_BATCH = 256
# How often a semantic lookup first picks up rows stored by other processes.
SEMANTIC_SYNC_S = 2.0


@dataclass
class CacheHit:
    """A cached answer, ready for the pipeline to send as route ``cache``."""

    text: str
    finish_reason: str
    usage: Usage
    reason: str  # "hit" | "faq" | "semantic"
    key: str
    stored_at: float
    model: str
    age_s: float


def _is_corruption(exc: BaseException) -> bool:
    """A damaged database file (not a busy or full one, which pass by themselves)."""
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(
        exc, sqlite3.OperationalError | sqlite3.IntegrityError
    )


class AnswerCache:
    """Persistent, process-safe answer cache; every public method is synchronous and cheap."""

    def __init__(self, config: CacheConfig, data_dir: Path) -> None:
        self._config = config
        self.directory = Path(config.directory) if config.directory else Path(data_dir) / "cache"
        self._fingerprint = ""
        self._knowledge = str(config.knowledge_version)
        self._lock = threading.RLock()  # re-entered when a recovery counts its own errors
        self._counts: Counter[str] = Counter()
        self._answers: diskcache.Cache | None = None
        self._faq: diskcache.Cache | None = None
        self._db_inode: int | None = None
        self._closed = False
        self._touched: dict[str, float] = {}
        self._faq_files: dict[str, Path] = {}  # source name -> file, reloaded after a recovery
        self._touch_flushed = time.monotonic()
        self._semantic: Any = None
        self._sem_rowids: dict[str, int] = {}
        self._sem_synced = 0.0
        if config.enabled:
            self._open(recover=True)
        if config.enabled and config.semantic:
            self._start_semantic()

    # ----------------------------------------------------------------- set-up and recovery
    def _open(self, recover: bool) -> None:
        try:
            self._open_stores()
        except Exception as exc:
            if recover and _is_corruption(exc):
                log.error("cache database at %s is damaged (%s); moving it aside", self.directory, exc)
                self._count("errors")
                self._quarantine()
                self._open(recover=False)
                return
            log.error("cache at %s cannot be opened (%s); running without a cache", self.directory, exc)
            self._count("errors")
            self._answers = self._faq = None

    def _open_stores(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._answers = diskcache.Cache(  # disk=JSONDisk: never diskcache's default pickling disk
            str(self.directory / "answers"),
            timeout=SQLITE_TIMEOUT_S,
            disk=JSONDisk,
            size_limit=int(self._config.size_limit_bytes),
            eviction_policy="least-recently-used",
            tag_index=True,
            statistics=False,
        )
        self._faq = diskcache.Cache(  # disk=JSONDisk, as above
            str(self.directory / "faq"),
            timeout=SQLITE_TIMEOUT_S,
            disk=JSONDisk,
            eviction_policy="none",
            statistics=False,
        )
        for store in (self._answers, self._faq):
            dc.check_layout(store)  # a diskcache that moved its internals fails here, loudly
        self._db_inode = self._inode()

    def _inode(self) -> int | None:
        try:
            return os.stat(self.directory / "answers" / "cache.db").st_ino
        except OSError:
            return None

    def _quarantine(self) -> None:
        """Move a damaged cache directory aside (kept for a post-mortem) so a fresh one can start."""
        self._close_stores()
        target = self.directory.with_name(f"{self.directory.name}.corrupt-{int(time.time() * 1000)}")
        try:
            self.directory.rename(target)
            log.warning("damaged cache moved to %s", target)
        except OSError as exc:
            log.error("cannot move the damaged cache aside (%s)", exc)

    def _recover_if_damaged(self, exc: BaseException) -> None:
        """After a corruption error: replace the database, unless another process already did."""
        if not _is_corruption(exc):
            return
        with self._lock:
            if self._inode() == self._db_inode:
                self._quarantine()
            else:
                self._close_stores()
            self._open(recover=False)
            self._counts["recoveries"] += 1
        if self._semantic is not None:
            self._semantic.clear()
            self._sem_rowids = {}
        # The operator's FAQ packs were in the damaged database too: load the files again, so the
        # mall's opening hours do not wait for a restart. (Packs uploaded as a body are gone.)
        for path in list(self._faq_files.values()):
            try:
                self.load_faq(path)
            except Exception as reload_exc:
                log.error("FAQ pack %s not reloaded after the cache recovery: %s", path, reload_exc)

    def _close_stores(self) -> None:
        for store in (self._answers, self._faq):
            if store is not None:
                try:
                    store.close()
                except Exception as exc:  # closing a broken store must not stop the recovery
                    log.debug("closing a cache store failed: %s", exc)
        self._answers = self._faq = None

    def _start_semantic(self) -> Any:
        try:
            from edge.cache.semantic import SemanticIndex
            index = SemanticIndex(threshold=float(self._config.semantic_threshold))
        except Exception as exc:
            log.error("semantic matching is on but cannot start (%s); exact matching only", exc)
            self._count("errors")
            return None
        self._semantic = index
        self._sync_semantic()
        return index

    def _sync_semantic(self) -> None:
        """Index rows this process has not seen yet (stored earlier, or by another process).

        Rows carry their question's vector (``e``), so catching up costs no model run; rows from
        before semantic matching was switched on are embedded, a bounded batch per sync.
        """
        from edge.cache.semantic import unpack_vector

        index = self._semantic
        self._sem_synced = time.monotonic()
        if index is None:
            return
        for name, store in (("faq", self._faq), ("answers", self._answers)):
            if store is None:
                continue
            last = self._sem_rowids.get(name, 0)
            try:
                if dc.max_rowid(store) < last:  # cleared (maybe by another process): rowids restart from 1
                    last = 0
                rows = dc.live_rows_after(store, last, 5000)
                missing: list[tuple[str, str, str]] = []
                for rowid, key, mode, filename, raw_value in rows:
                    last = max(last, rowid)
                    try:
                        value = dc.decode(store, mode, filename, raw_value)
                    except (CorruptEntry, OSError):
                        continue
                    if not isinstance(value, dict) or not isinstance(value.get("q"), str):
                        continue
                    context = FAQ_CONTEXT if name == "faq" else str(value.get("ctx", ""))
                    if isinstance(value.get("e"), str):
                        index.add(context, key, value["q"], unpack_vector(value["e"]))
                    elif len(missing) < 256:
                        missing.append((context, key, value["q"]))
                if missing:
                    vectors = index.embedder.embed([q for _, _, q in missing])
                    for (context, key, question), vector in zip(missing, vectors, strict=True):
                        index.add(context, key, question, vector)
            except Exception as exc:
                self._error("semantic-sync", exc)
            self._sem_rowids[name] = last

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
        return self._semantic is not None

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
            if hit is None and self._semantic is not None:
                hit = self._lookup_semantic(parts, policy)
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
            if hit is None and self._semantic is not None:
                hit = self._lookup_semantic(parts, policy, touch=False)
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
            if self._semantic is not None:
                from edge.cache.semantic import pack_vector

                vector = self._semantic.vector(parts.question)
                value["e"] = pack_vector(vector)
            # Culling happens inside set(): the hits read since the last flush count first.
            self._flush_touches()
            answers.set(parts.key, value, expire=policy.ttl_s, tag=self._knowledge)
        except Exception as exc:
            self._error("store", exc)
            return False
        self._count("stores")
        if self._semantic is not None:
            try:
                self._semantic.add(parts.context, parts.key, parts.question, vector)
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
        vectors: dict[str, Any] = {}
        if self._semantic is not None:
            from edge.cache.semantic import pack_vector

            keys = list(rows)[: self._semantic.max_entries]  # the index holds no more than this anyway
            for key, vector in zip(keys, self._semantic.embedder.embed([rows[k]["q"] for k in keys]), strict=True):
                rows[key]["e"] = pack_vector(vector)
                vectors[key] = vector
        faq = self._faq
        if faq is None:
            raise ValueError("the answer cache is not available (disabled or its directory cannot be opened)")
        try:
            stale = [k for k in faq.iterkeys() if k not in rows and self._faq_source(faq, k) == source]
            with faq.transact():
                for key in stale:
                    faq.delete(key)
                for key, row in rows.items():
                    faq.set(key, row)
        except Exception as exc:
            self._error("load-faq", exc)
            raise ValueError(f"FAQ pack {source}: could not be written to the cache ({exc})") from exc
        if self._semantic is not None:
            for key in stale:
                self._semantic.remove(FAQ_CONTEXT, key)
            for key, vector in vectors.items():
                self._semantic.add(FAQ_CONTEXT, key, rows[key]["q"], vector)
        log.info("loaded %d FAQ entries (%d phrasings) from %s", len(entries), len(rows), source)
        self._count("faq_loads")
        return len(entries)

    def stats(self) -> dict[str, Any]:
        """Entries and bytes (shared by every process on this directory) and this process's counters."""
        with self._lock:
            counts = dict(self._counts)
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
            "semantic": self._semantic is not None,
            "semantic_entries": len(self._semantic) if self._semantic is not None else 0,
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
            out["errors"] = self._counts.get("errors", 0)
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
                if self._semantic is not None:
                    self._semantic.clear()
                    self._sem_rowids = {}
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
                for key in _matching_keys(store, matches):
                    if store.delete(key):
                        removed += 1
                        if self._semantic is not None:
                            self._semantic.remove_key(key)
        except Exception as exc:
            self._error("purge", exc)
        return removed

    def close(self) -> None:
        """Release the SQLite connections (the lead calls it at the end of the app lifespan)."""
        self._closed = True
        self._flush_touches()
        self._close_stores()

    # ------------------------------------------------------------------------ internals
    def _lookup_faq(self, question: str) -> CacheHit | None:
        faq = self._faq
        if faq is None:
            return None
        key = faq_key(question)
        value = self._get(faq, key)
        if value is None:
            return None
        valid = isinstance(value, dict) and isinstance(value.get("answer"), str)
        if not valid or value.get("q") != question:
            raise CorruptEntry("an FAQ entry does not have the shape this cache writes")
        return self._faq_hit(key, value, "faq")

    def _faq_hit(self, key: str, value: dict[str, Any], reason: str) -> CacheHit:
        stored_at = float(value.get("stored_at", 0.0))
        return CacheHit(
            text=value["answer"], finish_reason="stop", usage=Usage(0, 0), reason=reason, key=key,
            stored_at=stored_at, model="faq", age_s=max(0.0, time.time() - stored_at),
        )

    def _lookup_exact(self, parts: KeyParts, policy: CachePolicy, touch: bool = True) -> CacheHit | None:
        answers = self._answers
        if answers is None:
            return None
        value = self._get(answers, parts.key, touch)
        if value is None:
            return None
        hit = self._answer_hit(parts.key, value, policy, "hit")
        if hit is not None and (value.get("q") != parts.question or value.get("ctx") != parts.context):
            raise CorruptEntry("a cached answer does not belong to the key it is stored under")
        return hit

    def _answer_hit(self, key: str, value: Any, policy: CachePolicy, reason: str) -> CacheHit | None:
        valid = isinstance(value, dict) and isinstance(value.get("text"), str)
        if not valid or value.get("v") != VALUE_SCHEMA:
            raise CorruptEntry("a cached answer does not have the shape this cache writes")
        stored_at = float(value.get("stored_at", 0.0))
        age = max(0.0, time.time() - stored_at)
        if policy.max_age_s is not None and age > policy.max_age_s:
            return None  # older than the kiosk accepts (cache-control: max-age)
        usage = value.get("usage") or {}
        return CacheHit(
            text=value["text"],
            finish_reason=str(value.get("finish_reason", "stop")),
            usage=Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))),
            reason=reason,
            key=key,
            stored_at=stored_at,
            model=str(value.get("model", "")),
            age_s=age,
        )

    def _lookup_semantic(self, parts: KeyParts, policy: CachePolicy, touch: bool = True) -> CacheHit | None:
        index = self._semantic
        if time.monotonic() - self._sem_synced > SEMANTIC_SYNC_S:
            self._sync_semantic()
        for context in (FAQ_CONTEXT, parts.context):
            for key in index.candidates(context, parts.question):
                store = self._faq if context == FAQ_CONTEXT else self._answers
                if store is None:
                    continue
                value = self._get(store, key, touch)
                if not isinstance(value, dict):
                    index.remove(context, key)  # expired or evicted since it was indexed
                    continue
                if not index.agrees(parts.question, str(value.get("q", ""))):
                    continue  # re-checked on the stored text, not on what the index remembered
                if context == FAQ_CONTEXT:
                    return self._faq_hit(key, value, "semantic")
                hit = self._answer_hit(key, value, policy, "semantic")
                if hit is not None:
                    return hit
        return None

    def _get(self, store: diskcache.Cache, key: str, touch: bool = True) -> Any:
        """Read one value without writing; a corrupt row is deleted and reported.

        diskcache's own ``get`` under least-recently-used eviction writes the access time in a
        transaction on every read (about 0.2 ms, and it fails on a full disk). Here the read is a
        plain SELECT and the access times of the rows read are written in one batch at most once a
        second and before every store (``_flush_touches``): diskcache culls only when it stores, so
        eviction stays least-recently-used, and a lookup does no write of its own.
        """
        try:
            value = dc.read_live(store, key)
        except CorruptEntry:
            try:
                store.delete(key)
            except Exception as exc:
                log.debug("deleting a corrupt entry failed: %s", exc)
            raise
        if touch and value is not None and store is self._answers:
            self._touch(key)
        return value

    def _touch(self, key: str) -> None:
        with self._lock:
            self._touched[key] = time.time()
            due = len(self._touched) >= TOUCH_BATCH or time.monotonic() - self._touch_flushed >= TOUCH_INTERVAL_S
        if due:
            self._flush_touches()

    def _flush_touches(self) -> None:
        """Write the batched access times (the LRU order diskcache culls by)."""
        with self._lock:
            touched, self._touched = self._touched, {}
            self._touch_flushed = time.monotonic()
        answers = self._answers
        if not touched or answers is None:
            return
        try:
            dc.write_access_times(answers, [(at, key) for key, at in touched.items()])
        except Exception as exc:  # a full or locked disk: the order is a hint, the answers still serve
            self._error("lru-touch", exc)

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

    def _faq_source(self, faq: diskcache.Cache, key: str) -> str | None:
        try:
            value = faq.get(key)
        except CorruptEntry:
            return None
        return value.get("source") if isinstance(value, dict) else None

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def _error(self, where: str, exc: BaseException) -> None:
        self._count("errors")
        self._count(f"errors_{where}")
        log.warning("cache %s failed: %s: %s", where, type(exc).__name__, exc)
        self._recover_if_damaged(exc)


def _matching_keys(store: diskcache.Cache, predicate: Callable[[str, Any], bool]) -> list[str]:
    """Keys of the live rows whose decoded value satisfies ``predicate(key, value)``.

    Reads in batches so purging a million-entry cache does not hold every value in memory;
    rows that fail to decode are left to the lookup path, which deletes them when met.
    """
    keys: list[str] = []
    for key, mode, filename, value in dc.iter_live_rows(store):
        try:
            decoded = dc.decode(store, mode, filename, value)
        except (CorruptEntry, OSError):
            continue
        if isinstance(decoded, dict) and predicate(key, decoded):
            keys.append(key)
    return keys


__all__ = ["AnswerCache", "CacheHit"]
