"""The cache never fails a request: corrupt rows and files, planted pickles, full disks.

Full disk is shown three ways: a real 384 KiB tmpfs (when the tests run as root, as CI does),
SQLite's own ``max_page_count`` limit (the genuine SQLITE_FULL error, anywhere), and an ``OSError``
(ENOSPC) raised by the Disk layer when it writes a value file.
"""

from __future__ import annotations

import errno
import os
import pickle
import shutil
import sqlite3
import subprocess
import uuid
from pathlib import Path

import diskcache
import pytest

from edge.cache import AnswerCache
from edge.cache.disk import JSONDisk
from edge.config import CacheConfig

from .conftest import SAMPLE_FAQ, ask, recall, remember

Q = "When does the mall open?"
A = "At 10:00."


def _db(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "answers" / "cache.db"


def test_corrupt_entry_is_a_counted_miss_and_is_removed(cache: AnswerCache, tmp_path: Path) -> None:
    remember(cache, ask(Q), A)
    with sqlite3.connect(_db(tmp_path)) as db:
        db.execute("UPDATE Cache SET value = ?", (b"\x00\xffnot json",))
    assert recall(cache, ask(Q)) is None
    stats = cache.stats()
    assert stats["errors"] == 1 and stats["entries"] == 0  # the bad row is gone
    assert remember(cache, ask(Q), A) and recall(cache, ask(Q)).text == A


def test_wrong_shaped_entry_is_not_served(cache: AnswerCache, tmp_path: Path) -> None:
    remember(cache, ask(Q), A)
    with sqlite3.connect(_db(tmp_path)) as db:
        db.execute("UPDATE Cache SET value = ?", (b'{"v": 1, "text": 42}',))
    assert recall(cache, ask(Q)) is None and cache.stats()["errors"] == 1


class _Payload:
    """Unpickling this would create a file: the proof that a planted pickle was not loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_planted_pickle_is_never_loaded(cache: AnswerCache, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    key = cache.key_parts(ask(Q)).key
    attacker = diskcache.Cache(str(tmp_path / "cache" / "answers"))  # diskcache's default, pickling Disk
    attacker.set(key, _Payload(marker))
    attacker.close()
    assert pickle.dumps(_Payload(marker))  # the payload is a real pickle
    assert recall(cache, ask(Q)) is None
    assert not marker.exists()
    assert cache.stats()["errors"] == 1


def test_json_disk_refuses_non_string_keys(tmp_path: Path) -> None:
    store = diskcache.Cache(str(tmp_path / "d"), disk=JSONDisk)
    with pytest.raises(TypeError, match="keys must be str"):
        store.set(("tuple", "key"), {"a": 1})
    store.set("k", {"a": [1, "二"]})
    assert store.get("k") == {"a": [1, "二"]}
    store.close()


def test_a_damaged_database_file_is_moved_aside(make_cache, tmp_path: Path) -> None:
    first = make_cache()
    remember(first, ask(Q), A)
    first.close()
    for suffix in ("-wal", "-shm"):
        Path(str(_db(tmp_path)) + suffix).unlink(missing_ok=True)
    _db(tmp_path).write_bytes(b"this is not an sqlite database" * 100)
    cache = make_cache()
    stats = cache.stats()
    assert stats["enabled"] and stats["errors"] >= 1
    assert [p.name.startswith("cache.corrupt-") for p in tmp_path.iterdir()].count(True) == 1
    assert recall(cache, ask(Q)) is None
    assert remember(cache, ask(Q), A) and recall(cache, ask(Q)).text == A


def test_a_cache_that_cannot_open_at_all_runs_disabled(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the cache directory should be")
    cache = AnswerCache(CacheConfig(directory=blocker / "cache"), tmp_path)
    assert recall(cache, ask(Q)) is None
    assert not remember(cache, ask(Q), A)
    assert cache.stats()["enabled"] is False and cache.stats()["errors"] >= 1
    cache.close()


def test_database_full_sqlite_limit(cache: AnswerCache) -> None:
    """SQLITE_FULL from SQLite's page limit: stores fail softly, existing answers are still served."""
    remember(cache, ask(Q), A)
    store = cache._answers
    (pages,) = store._sql("PRAGMA page_count").fetchone()
    store._sql(f"PRAGMA max_page_count = {pages}")
    stored = [remember(cache, ask(f"question {i}"), "y" * 3000) for i in range(40)]
    assert not all(stored)
    assert cache.stats()["errors"] >= 1
    assert recall(cache, ask(Q)).text == A


class _FullDisk(JSONDisk):
    def _write(self, full_path, iterator, mode, encoding=None):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), full_path)


def test_disk_full_when_writing_a_value_file(cache: AnswerCache) -> None:
    """Values over diskcache's inline limit go to files; ENOSPC there is a skipped store."""
    cache._answers._disk = _FullDisk(cache._answers.directory, min_file_size=0)
    assert not remember(cache, ask(Q), A)
    assert cache.stats()["errors"] == 1 and cache.stats()["entries"] == 0
    assert recall(cache, ask(Q)) is None


@pytest.fixture
def tiny_fs(tmp_path: Path):
    """A real 384 KiB tmpfs, or a skip where mounting is not allowed."""
    mount_point = tmp_path / f"tiny-{uuid.uuid4().hex[:6]}"
    mount_point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=384k", "tmpfs", str(mount_point)],
                          capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_real_full_disk(tiny_fs: Path) -> None:
    cache = AnswerCache(CacheConfig(directory=tiny_fs / "cache", size_limit_bytes=64 * 1024 * 1024), tiny_fs)
    ballast = tiny_fs / "ballast"  # another program's file, deleted later to free space
    ballast.write_bytes(b"\0" * 96 * 1024)
    try:
        assert remember(cache, ask(Q), A)
        stored = 0
        for i in range(400):
            if not remember(cache, ask(f"question {i}"), "z" * 4000):
                break
            stored += 1
        else:
            pytest.fail("the 384 KiB file system never filled up")
        assert cache.stats()["errors"] >= 1
        hit = recall(cache, ask(Q))  # a full disk still serves what it holds
        assert hit is not None and hit.text == A
        ballast.unlink()  # space comes back: the same cache object works again
        assert remember(cache, ask("after the space came back"), "ok")
        assert recall(cache, ask("after the space came back")).text == "ok"
    finally:
        cache.close()


def test_damage_while_running_is_recovered(cache: AnswerCache, tmp_path: Path) -> None:
    remember(cache, ask(Q), A)
    with open(_db(tmp_path), "r+b") as db_file:
        db_file.write(b"garbage!" * 4096)
    # Whichever call meets the damage first moves the database aside; none of them raises.
    cache.stats()
    recall(cache, ask(Q))
    remember(cache, ask("another question"), "another answer")
    assert cache.stats()["errors"] >= 1
    assert any(p.name.startswith("cache.corrupt-") for p in tmp_path.iterdir())
    assert remember(cache, ask("after recovery"), "fine")
    assert recall(cache, ask("after recovery")).text == "fine"


def test_faq_files_are_reloaded_after_a_recovery(cache: AnswerCache, tmp_path: Path) -> None:
    cache.load_faq(SAMPLE_FAQ)
    assert recall(cache, ask("What time does the mall open?")).reason == "faq"
    for name in ("answers", "faq"):
        with open(tmp_path / "cache" / name / "cache.db", "r+b") as db_file:
            db_file.write(b"garbage!" * 4096)
    for _ in range(3):  # whichever call meets the damage first triggers the recovery
        cache.stats()
        recall(cache, ask("What time does the mall open?"))
    assert any(p.name.startswith("cache.corrupt-") for p in tmp_path.iterdir())
    hit = recall(cache, ask("What time does the mall open?"))
    assert hit is not None and hit.reason == "faq"
