"""The answer cache's two diskcache stores on disk: opened, read without writes, recovered.

Why this shape:
- diskcache (SQLite + files) in the device's data directory survives restarts and is safe when
  several gateway processes share it; values go through ``JSONDisk``, never pickle.
- Two stores: ``answers/`` holds model answers with a TTL and least-recently-used eviction under a
  byte limit; ``faq/`` holds the operator's FAQ answers, never evicted (losing the mall's opening
  hours to LRU pressure would send the question to a model that does not know them).
- A damaged database is moved aside (kept for a post-mortem) and a fresh one opened, once per
  damage even when several processes meet it: the inode of ``cache.db`` tells whether another
  process already replaced it. The caller then reloads what lived in the old one.
- Reads do not write (see ``CacheStores.get``); access times are written in batches.

Every use of diskcache beyond its documented API goes through ``edge.cache.diskcache_private``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import diskcache

from edge.cache import diskcache_private as dc
from edge.cache.disk import CorruptEntry, JSONDisk
from edge.config import CacheConfig

log = logging.getLogger("edgecloud.cache")

# SQLite busy timeout: a lookup waits at most this long for another process's write.
SQLITE_TIMEOUT_S = 1.0
# Access times of hits are written in batches: at most this often, or every this many hits.
TOUCH_INTERVAL_S = 1.0
TOUCH_BATCH = 256

ErrorReport = Callable[[str, BaseException], None]


def is_corruption(exc: BaseException) -> bool:
    """A damaged database file (not a busy or full one, which pass by themselves)."""
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(
        exc, sqlite3.OperationalError | sqlite3.IntegrityError
    )


class CacheCounts:
    """This process's counters (hits, misses, stores, errors...), safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


class CacheStores:
    """``answers/`` and ``faq/`` of one cache directory; both None while the cache cannot open.

    ``report(where, exc)`` is the owner's error sink: it counts and logs the error and calls
    ``recover_if_damaged`` (a failed batch of access times can be the first sign of damage).
    """

    def __init__(self, config: CacheConfig, directory: Path, counts: CacheCounts, report: ErrorReport) -> None:
        self.directory = directory
        self._size_limit = int(config.size_limit_bytes)
        self._counts = counts
        self._report = report
        self._lock = threading.RLock()
        self.answers: diskcache.Cache | None = None
        self.faq: diskcache.Cache | None = None
        self._db_inode: int | None = None
        self._closed = False
        self._touched: dict[str, float] = {}
        self._touch_flushed = time.monotonic()
        if config.enabled:
            self._open(recover=True)

    # ----------------------------------------------------------------- opening and recovery
    def _open(self, recover: bool) -> None:
        try:
            self._open_stores()
        except Exception as exc:
            if recover and is_corruption(exc):
                log.error("cache database at %s is damaged (%s); moving it aside", self.directory, exc)
                self._counts.add("errors")
                self._quarantine()
                self._open(recover=False)
                return
            log.error("cache at %s cannot be opened (%s); running without a cache", self.directory, exc)
            self._counts.add("errors")
            self.answers = self.faq = None

    def _open_stores(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.answers = diskcache.Cache(  # disk=JSONDisk: never diskcache's default pickling disk
            str(self.directory / "answers"),
            timeout=SQLITE_TIMEOUT_S,
            disk=JSONDisk,
            size_limit=self._size_limit,
            eviction_policy="least-recently-used",
            tag_index=True,
            statistics=False,
        )
        self.faq = diskcache.Cache(  # disk=JSONDisk, as above
            str(self.directory / "faq"),
            timeout=SQLITE_TIMEOUT_S,
            disk=JSONDisk,
            eviction_policy="none",
            statistics=False,
        )
        for store in (self.answers, self.faq):
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

    def recover_if_damaged(self, exc: BaseException) -> bool:
        """After a corruption error: replace the database, unless another process already did.

        Returns whether fresh stores were opened (the caller reloads what the old ones held).
        A closed cache is not reopened.
        """
        if not is_corruption(exc) or self._closed:
            return False
        with self._lock:
            if self._inode() == self._db_inode:
                self._quarantine()
            else:
                self._close_stores()
            self._open(recover=False)
        self._counts.add("recoveries")
        return True

    def _close_stores(self) -> None:
        for store in (self.answers, self.faq):
            if store is not None:
                try:
                    store.close()
                except Exception as exc:  # closing a broken store must not stop the recovery
                    log.debug("closing a cache store failed: %s", exc)
        self.answers = self.faq = None

    def close(self) -> None:
        """Write the pending access times, then release the SQLite connections."""
        self._closed = True
        self.flush_touches()
        self._close_stores()

    # ----------------------------------------------------------------- reads and access times
    def get(self, store: diskcache.Cache, key: str, touch: bool = True) -> Any:
        """Read one value without writing; a corrupt row is deleted and reported. ``touch=False``
        (a preview) leaves the LRU order as it was.

        diskcache's own ``get`` under least-recently-used eviction writes the access time in a
        transaction on every read (about 0.2 ms, and it fails on a full disk). Here the read is a
        plain SELECT and the access times of the rows read are written in one batch at most once a
        second and before every store (``flush_touches``): diskcache culls only when it stores, so
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
        if touch and value is not None and store is self.answers:
            self._touch(key)
        return value

    def faq_source(self, key: str) -> str | None:
        """The pack an FAQ row came from (None for a missing or unreadable row)."""
        faq = self.faq
        try:
            value = faq.get(key) if faq is not None else None
        except CorruptEntry:
            return None
        return value.get("source") if isinstance(value, dict) else None

    def _touch(self, key: str) -> None:
        with self._lock:
            self._touched[key] = time.time()
            due = len(self._touched) >= TOUCH_BATCH or time.monotonic() - self._touch_flushed >= TOUCH_INTERVAL_S
        if due:
            self.flush_touches()

    def flush_touches(self) -> None:
        """Write the batched access times (the LRU order diskcache culls by)."""
        with self._lock:
            touched, self._touched = self._touched, {}
            self._touch_flushed = time.monotonic()
        answers = self.answers
        if not touched or answers is None:
            return
        try:
            dc.write_access_times(answers, [(at, key) for key, at in touched.items()])
        except Exception as exc:  # a full or locked disk: the order is a hint, the answers still serve
            self._report("lru-touch", exc)


def matching_keys(store: diskcache.Cache, predicate: Callable[[str, Any], bool]) -> list[str]:
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
