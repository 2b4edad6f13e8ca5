"""The answer cache's semantic index, kept in step with the stores that every process writes.

The index (``edge.cache.semantic.SemanticIndex``) lives in this process's memory; the rows live on
disk, shared with the other gateway processes. ``SemanticSync`` catches up with rows it has not
seen (stored earlier, or by another process) at start and at most every ``SEMANTIC_SYNC_S`` before
a semantic lookup, by reading rows after the last rowid seen per store. Rows carry their
question's vector (``e``), so catching up costs no model run; rows from before semantic matching
was switched on are embedded, a bounded batch per sync.

A neighbour the index proposes is answered only after the term guard agrees on the stored
question (not on what the index remembered), and a row gone from disk is dropped from the index.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from edge.cache import diskcache_private as dc
from edge.cache.disk import CorruptEntry
from edge.cache.entries import FAQ_CONTEXT, CacheHit, answer_hit, faq_hit
from edge.cache.keys import KeyParts
from edge.cache.policy import CachePolicy
from edge.cache.stores import CacheCounts, CacheStores, ErrorReport
from edge.config import CacheConfig

if TYPE_CHECKING:
    import numpy as np

    from edge.cache.semantic import SemanticIndex

log = logging.getLogger("edgecloud.cache")

# How often a semantic lookup first picks up rows stored by other processes.
SEMANTIC_SYNC_S = 2.0
SYNC_ROWS = 5000  # rows read per store and sync
EMBED_PER_SYNC = 256  # rows without a vector embedded per sync


class SemanticSync:
    """One process's semantic index over the cache's stores."""

    def __init__(self, index: SemanticIndex, stores: CacheStores, report: ErrorReport) -> None:
        self.index = index
        self._stores = stores
        self._report = report
        self._rowids: dict[str, int] = {}  # store name -> the last rowid indexed
        self._synced = 0.0
        self.sync()

    def __len__(self) -> int:
        return len(self.index)

    def reset(self) -> None:
        """Forget everything (the stores were cleared or replaced); the next sync starts from row 1."""
        self.index.clear()
        self._rowids = {}

    def sync(self) -> None:
        """Index the rows this process has not seen yet."""
        from edge.cache.semantic import unpack_vector

        index = self.index
        self._synced = time.monotonic()
        for name, store in (("faq", self._stores.faq), ("answers", self._stores.answers)):
            if store is None:
                continue
            last = self._rowids.get(name, 0)
            try:
                if dc.max_rowid(store) < last:  # cleared (maybe by another process): rowids restart from 1
                    last = 0
                missing: list[tuple[str, str, str]] = []
                for rowid, key, mode, filename, raw_value in dc.live_rows_after(store, last, SYNC_ROWS):
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
                    elif len(missing) < EMBED_PER_SYNC:
                        missing.append((context, key, value["q"]))
                if missing:
                    vectors = index.embedder.embed([q for _, _, q in missing])
                    for (context, key, question), vector in zip(missing, vectors, strict=True):
                        index.add(context, key, question, vector)
            except Exception as exc:
                self._report("semantic-sync", exc)
            self._rowids[name] = last

    def lookup(self, parts: KeyParts, policy: CachePolicy, touch: bool = True) -> CacheHit | None:
        """A guarded neighbour of the question: among the FAQ first, then in its own context.
        ``touch=False`` (a preview) leaves the LRU order as it was."""
        index = self.index
        if time.monotonic() - self._synced > SEMANTIC_SYNC_S:
            self.sync()
        for context in (FAQ_CONTEXT, parts.context):
            for key in index.candidates(context, parts.question):
                store = self._stores.faq if context == FAQ_CONTEXT else self._stores.answers
                if store is None:
                    continue
                value = self._stores.get(store, key, touch)
                if not isinstance(value, dict):
                    index.remove(context, key)  # expired or evicted since it was indexed
                    continue
                if not index.agrees(parts.question, str(value.get("q", ""))):
                    continue  # re-checked on the stored text, not on what the index remembered
                if context == FAQ_CONTEXT:
                    return faq_hit(key, value, "semantic")
                hit = answer_hit(key, value, policy, "semantic")
                if hit is not None:
                    return hit
        return None

    def packed_vector(self, question: str) -> tuple[np.ndarray, str]:
        """The question's vector, and its packed form for the row's ``e`` field."""
        from edge.cache.semantic import pack_vector

        vector = self.index.vector(question)
        return vector, pack_vector(vector)

    def embed_rows(self, rows: dict[str, dict[str, Any]]) -> dict[str, np.ndarray]:
        """Vectors of FAQ rows' questions (as many as the index holds), each packed into its row."""
        from edge.cache.semantic import pack_vector

        keys = list(rows)[: self.index.max_entries]  # the index holds no more than this anyway
        vectors = dict(zip(keys, self.index.embedder.embed([rows[k]["q"] for k in keys]), strict=True))
        for key, vector in vectors.items():
            rows[key]["e"] = pack_vector(vector)
        return vectors


def start_semantic(
    config: CacheConfig, stores: CacheStores, counts: CacheCounts, report: ErrorReport
) -> SemanticSync | None:
    """The semantic index, synced with the stores; None (and an error counted) when it cannot start."""
    try:
        from edge.cache.semantic import SemanticIndex

        index = SemanticIndex(threshold=float(config.semantic_threshold))
    except Exception as exc:
        log.error("semantic matching is on but cannot start (%s); exact matching only", exc)
        counts.add("errors")
        return None
    return SemanticSync(index, stores, report)
