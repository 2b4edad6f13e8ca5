"""Every use the answer cache makes of diskcache beyond its documented API, and what each assumes.

diskcache's public ``get`` writes the access time on every read (a transaction per lookup, and a
failure on a full disk), and it has no way to read rows newer than a given one; the answer cache
needs both, so it reads diskcache's SQLite table directly. This module is the only place that
does. The assumptions, each checked by ``check_assumptions`` (in ``tests/cache/test_diskcache_private.py``;
the cache runs the write-free part, ``check_layout``, every time it opens):

1. ``Cache._sql`` is a callable that runs one statement on the cache's own connection (thread-
   local, the same busy timeout), returning a ``sqlite3.Cursor``.
2. ``Cache._con`` is that ``sqlite3.Connection``; inside ``Cache.transact()`` writes through it
   join diskcache's transaction.
3. The table is ``Cache`` with at least the columns ``rowid, key, raw, store_time, expire_time,
   access_time, mode, filename, value``; a string key is stored with ``raw = 1``; ``expire_time``
   is NULL or epoch seconds; ``rowid`` grows as rows are added (so "rows after rowid N" is what
   another process stored since); ``bulk_insert`` (benchmarks only) writes rows with the columns
   ``access_count, tag, size`` as well.
4. ``eviction_policy="least-recently-used"`` culls by ``access_time`` (ascending), so writing
   that column by hand keeps eviction least-recently-used.
5. ``Disk.fetch(mode, filename, value, read)`` decodes a row's ``(mode, filename, value)``;
   ``diskcache.core`` has ``MODE_RAW``, ``MODE_BINARY``, ``MODE_PICKLE`` (used by
   ``edge.cache.disk.JSONDisk``, which subclasses the documented ``Disk`` extension point).

If any of these breaks, ``check_assumptions`` raises ``DiskcacheAssumptionError`` naming it: a new
diskcache must fail loudly here rather than turn every hit into a silent miss.
``pyproject.toml`` bounds diskcache to the release line this was checked against.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import diskcache
import diskcache.core

REQUIRED_COLUMNS = frozenset(
    {"key", "raw", "store_time", "expire_time", "access_time", "access_count", "tag", "size", "mode",
     "filename", "value"}
)
CHECKED_VERSIONS = "5.6"


class DiskcacheAssumptionError(RuntimeError):
    """diskcache no longer behaves as ``edge.cache.diskcache_private`` assumes."""


def read_live(store: diskcache.Cache, key: str) -> Any:
    """The live value under ``key`` (None when absent or expired), without writing its access time."""
    rows = store._sql(
        "SELECT mode, filename, value FROM Cache WHERE key = ? AND raw = 1"
        " AND (expire_time IS NULL OR expire_time > ?)",
        (key, time.time()),
    ).fetchall()
    if not rows:
        return None
    mode, filename, value = rows[0]
    return store.disk.fetch(mode, filename, value, False)


def max_rowid(store: diskcache.Cache) -> int:
    (top,) = store._sql("SELECT COALESCE(MAX(rowid), 0) FROM Cache").fetchone()
    return int(top)


def live_rows_after(store: diskcache.Cache, rowid: int, limit: int) -> list[tuple[int, str, int, Any, Any]]:
    """``(rowid, key, mode, filename, value)`` of live rows stored after ``rowid``, oldest first."""
    return store._sql(
        "SELECT rowid, key, mode, filename, value FROM Cache WHERE rowid > ? AND raw = 1"
        " AND (expire_time IS NULL OR expire_time > ?) ORDER BY rowid LIMIT ?",
        (rowid, time.time(), limit),
    ).fetchall()


def iter_live_rows(store: diskcache.Cache, batch: int = 1000) -> Iterator[tuple[str, int, Any, Any]]:
    """``(key, mode, filename, value)`` of every live row, fetched ``batch`` at a time."""
    cursor = store._sql(
        "SELECT key, mode, filename, value FROM Cache WHERE raw = 1 AND (expire_time IS NULL OR expire_time > ?)",
        (time.time(),),
    )
    while True:
        rows = cursor.fetchmany(batch)
        if not rows:
            return
        yield from rows


def decode(store: diskcache.Cache, mode: int, filename: Any, value: Any) -> Any:
    """A row's value through the store's ``Disk`` (``JSONDisk`` raises ``CorruptEntry`` on a bad row)."""
    return store.disk.fetch(mode, filename, value, False)


def write_access_times(store: diskcache.Cache, touched: Iterable[tuple[float, str]]) -> None:
    """Set ``access_time`` of the given ``(time, key)`` rows in one transaction (the LRU order)."""
    with store.transact():
        store._con.executemany("UPDATE Cache SET access_time = ? WHERE key = ? AND raw = 1", list(touched))


def bulk_insert(store: diskcache.Cache, rows: Iterable[tuple[str, float, float | None, float, Any, bytes]]) -> None:
    """Write many ``(key, store_time, expire_time, access_time, tag, json_bytes)`` rows in one transaction.

    For benchmarks that fill a cache with millions of entries (``Cache.set`` would take hours);
    values are stored inline as ``MODE_RAW``, the way ``JSONDisk`` stores a small value.
    """
    with store.transact():
        store._con.executemany(
            "INSERT OR REPLACE INTO Cache(key, raw, store_time, expire_time, access_time, access_count,"
            " tag, size, mode, filename, value) VALUES (?, 1, ?, ?, ?, 0, ?, 0, ?, NULL, ?)",
            [(k, st, et, at, tag, diskcache.core.MODE_RAW, sqlite3.Binary(v)) for k, st, et, at, tag, v in rows],
        )


def access_time(store: diskcache.Cache, key: str) -> float | None:
    row = store._sql("SELECT access_time FROM Cache WHERE key = ? AND raw = 1", (key,)).fetchone()
    return None if row is None else float(row[0])


def _fail(number: int, detail: str) -> DiskcacheAssumptionError:
    return DiskcacheAssumptionError(
        f"diskcache {getattr(diskcache, '__version__', '?')} breaks assumption {number} of "
        f"edge.cache.diskcache_private (checked on {CHECKED_VERSIONS}.x): {detail}"
    )


def check_layout(store: diskcache.Cache) -> None:
    """The assumptions that need no write (attributes, constants, table columns, LRU column).

    Run on every open of the cache: a schema read, well under a millisecond.
    """
    fail = _fail
    for name in ("MODE_RAW", "MODE_BINARY", "MODE_PICKLE"):
        if not isinstance(getattr(diskcache.core, name, None), int):
            raise fail(5, f"diskcache.core.{name} is gone")
    if not callable(getattr(store, "_sql", None)):
        raise fail(1, "Cache._sql is not a callable")
    if not isinstance(getattr(store, "_con", None), sqlite3.Connection):
        raise fail(2, "Cache._con is not a sqlite3.Connection")
    columns = {row[1] for row in store._sql("PRAGMA table_info(Cache)").fetchall()}
    if not REQUIRED_COLUMNS <= columns:
        raise fail(3, f"table Cache lacks {sorted(REQUIRED_COLUMNS - columns)}")
    policy = getattr(diskcache.core, "EVICTION_POLICY", {}).get("least-recently-used", {})
    if "access_time" not in str(policy.get("cull", "")):
        raise fail(4, "the least-recently-used policy no longer culls by access_time")


def check_assumptions(store: diskcache.Cache) -> None:
    """Raise ``DiskcacheAssumptionError`` unless every assumption in this module's docstring holds.

    ``check_layout`` plus a round trip: one probe row written with ``Cache.set``, read back the way
    a lookup reads, found by the "rows after" query, its access time written, then deleted.
    """
    fail = _fail
    check_layout(store)
    key = f"__edgecloud_probe_{uuid.uuid4().hex}"
    probe = {"probe": key}
    before = max_rowid(store)
    try:
        store.set(key, probe)
        try:
            found = read_live(store, key)
        except Exception as exc:
            raise fail(5, f"a row written by Cache.set does not decode ({exc})") from exc
        if found != probe:
            raise fail(3, "a value written by Cache.set is not read back from the table (hits would be misses)")
        if not any(k == key for _, k, *_ in live_rows_after(store, before, 1_000_000)):
            raise fail(3, "a new row's rowid is not above the previous maximum")
        write_access_times(store, [(12345.0, key)])
        if access_time(store, key) != 12345.0:
            raise fail(2, "an access time written through Cache._con did not stick")
    finally:
        store.delete(key)


__all__ = [
    "DiskcacheAssumptionError",
    "access_time",
    "bulk_insert",
    "check_assumptions",
    "check_layout",
    "decode",
    "iter_live_rows",
    "live_rows_after",
    "max_rowid",
    "read_live",
    "write_access_times",
]
