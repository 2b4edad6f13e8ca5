"""A diskcache ``Disk`` that stores JSON and refuses pickle in both directions.

diskcache's default ``Disk`` pickles any value that is not a str, bytes or number, and unpickles
whatever it finds in a row marked as pickled. The cache directory lives on a kiosk's writable
data partition: anyone who can write one row there would get code execution on the next lookup.
So keys must be plain strings, values are JSON documents stored as UTF-8 bytes, and a row that
claims to hold a pickle is reported as corrupt instead of being loaded.
"""

from __future__ import annotations

import json
from typing import Any

import diskcache
from diskcache.core import MODE_BINARY, MODE_PICKLE, MODE_RAW


class CorruptEntry(ValueError):
    """A row whose value is not the JSON object this cache wrote."""


class JSONDisk(diskcache.Disk):
    """Keys: ``str`` only. Values: JSON-serialisable objects, stored as compact UTF-8 JSON bytes."""

    def put(self, key: Any) -> tuple[Any, bool]:
        if type(key) is not str:
            raise TypeError(f"cache keys must be str, not {type(key).__name__} (no pickled keys)")
        return super().put(key)

    def get(self, key: Any, raw: bool) -> Any:
        if not raw:
            raise CorruptEntry("a pickled key was found in the cache database; refusing to load it")
        return super().get(key, raw)

    def store(self, value: Any, read: bool, key: Any = diskcache.core.UNKNOWN) -> tuple[Any, ...]:
        if read:
            raise TypeError("file-like values are not supported by the answer cache")
        data = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return super().store(data, False, key=key)

    def fetch(self, mode: int, filename: str | None, value: Any, read: bool) -> Any:
        if mode == MODE_PICKLE:
            raise CorruptEntry("a pickled value was found in the cache database; refusing to load it")
        if mode not in (MODE_RAW, MODE_BINARY):
            raise CorruptEntry(f"unexpected storage mode {mode} in the cache database")
        data = super().fetch(mode, filename, value, False)
        if not isinstance(data, (bytes, bytearray)):
            raise CorruptEntry("a cache value is not the JSON bytes this cache writes")
        try:
            return json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptEntry(f"a cache value is not valid JSON ({exc})") from exc


__all__ = ["CorruptEntry", "JSONDisk"]
