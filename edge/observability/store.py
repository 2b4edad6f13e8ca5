"""The on-disk store of per-minute rows: SLA minutes and usage (for the cost report).

SQLite from the standard library: it survives restarts and power cuts (WAL), answers "every
minute of provider X since T" without loading everything, and needs no extra package. Rows are
JSON text, never pickle. Age (``retention_days``) and size (``max_bytes``) are both bounded, so a
kiosk that runs for years never fills its disk. Every method blocks: call them from a worker
thread (``asyncio.to_thread``), never on the event loop.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KINDS = ("route", "provider", "usage")
DB_NAME = "minutes.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS minutes (
    minute INTEGER NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (minute, kind, name)
) WITHOUT ROWID;
"""


@dataclass(frozen=True)
class StoredRow:
    minute: int
    kind: str
    name: str
    data: dict[str, Any]


class MinuteStore:
    """Rows keyed by (minute, kind, name); writing an existing key goes through ``merge``."""

    def __init__(
        self, directory: Path, retention_days: float = 14, max_bytes: int = 64 * 1024 * 1024
    ) -> None:
        self.directory = Path(directory)
        self.path = self.directory / DB_NAME
        self.retention_s = float(retention_days) * 86400.0
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()  # one writer at a time within this process
        self._ready = False

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        if not self._ready:
            self.directory.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=10.0)
        try:
            if not self._ready:
                # auto_vacuum must be chosen before the first table exists.
                conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.executescript(_SCHEMA)
                self._ready = True
            yield conn
            conn.commit()
        finally:
            conn.close()

    def write(self, rows: Iterable[StoredRow], merge: Any = None) -> int:
        """Insert rows; where the key exists, store ``merge(kind, old_data, new_data)`` instead."""
        rows = list(rows)
        if not rows:
            return 0
        with self._lock, self._connect() as conn:
            for row in rows:
                data = row.data
                if merge is not None:
                    cur = conn.execute(
                        "SELECT data FROM minutes WHERE minute = ? AND kind = ? AND name = ?",
                        (row.minute, row.kind, row.name),
                    ).fetchone()
                    if cur is not None:
                        data = merge(row.kind, json.loads(cur[0]), data)
                conn.execute(
                    "INSERT OR REPLACE INTO minutes (minute, kind, name, data) VALUES (?, ?, ?, ?)",
                    (row.minute, row.kind, row.name, json.dumps(data, separators=(",", ":"))),
                )
        return len(rows)

    def query(
        self,
        *,
        since: float = 0.0,
        until: float | None = None,
        kinds: Iterable[str] = KINDS,
        name: str | None = None,
    ) -> list[StoredRow]:
        if not self.path.exists():
            return []
        wanted = [k for k in KINDS if k in set(kinds)]
        sql = "SELECT minute, kind, name, data FROM minutes WHERE minute >= ? AND minute < ? AND kind = ?"
        if name is not None:
            sql += " AND name = ?"
        out: list[StoredRow] = []
        with self._connect() as conn:
            for kind in wanted:
                args: list[Any] = [int(since), int(until if until is not None else 2**62), kind]
                if name is not None:
                    args.append(name)
                out += [StoredRow(m, k, n, json.loads(d)) for m, k, n, d in conn.execute(sql, args)]
        out.sort(key=lambda r: (r.minute, r.kind, r.name))
        return out

    def size_bytes(self) -> int:
        if not self.path.exists():
            return 0
        with self._connect() as conn:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)

    def prune(self, now: float | None = None) -> int:
        """Drop rows older than the retention, then the oldest minutes until under ``max_bytes``."""
        if not self.path.exists():
            return 0
        now = time.time() if now is None else now
        removed = 0
        with self._lock, self._connect() as conn:
            removed += conn.execute(
                "DELETE FROM minutes WHERE minute < ?", (int(now - self.retention_s),)
            ).rowcount
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
            for _ in range(64):  # each pass drops the oldest tenth of the minutes
                used = (
                    conn.execute("PRAGMA page_count").fetchone()[0]
                    - conn.execute("PRAGMA freelist_count").fetchone()[0]
                ) * page_size
                if used <= self.max_bytes:
                    break
                n = conn.execute("SELECT COUNT(DISTINCT minute) FROM minutes").fetchone()[0]
                if not n:
                    break
                cutoff = conn.execute(
                    "SELECT minute FROM (SELECT DISTINCT minute FROM minutes ORDER BY minute LIMIT ?)"
                    " ORDER BY minute DESC LIMIT 1",
                    (max(1, n // 10),),
                ).fetchone()[0]
                removed += conn.execute("DELETE FROM minutes WHERE minute <= ?", (cutoff,)).rowcount
            conn.commit()
            conn.execute("PRAGMA incremental_vacuum")
        return removed
