"""diskcache's internals the answer cache relies on: checked, and loud when they move."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import diskcache
import pytest

from edge.cache import AnswerCache
from edge.cache import diskcache_private as dc
from edge.cache.disk import JSONDisk

from .conftest import ask, recall, remember


def _store(path: Path) -> diskcache.Cache:
    return diskcache.Cache(str(path), disk=JSONDisk, eviction_policy="least-recently-used")


def test_every_assumption_holds_for_the_installed_diskcache(tmp_path: Path) -> None:
    with _store(tmp_path / "c") as store:
        dc.check_assumptions(store)
        assert len(store) == 0  # the probe row is gone
        # The benchmarks' bulk fill writes rows that the public API and the lookup path both read.
        dc.bulk_insert(store, [("k1", 1.0, None, 1.0, None, b'{"q":"a"}')])
        assert store.get("k1") == dc.read_live(store, "k1") == {"q": "a"}


def test_a_stored_answer_is_a_hit_and_its_access_time_moves(make_cache: Callable[..., AnswerCache]) -> None:
    """The read path the cache uses (not diskcache's ``get``) finds what ``Cache.set`` wrote."""
    cache = make_cache()
    req = ask("Where can I buy a phone charger?")
    assert remember(cache, req, "Level 2, next to the pharmacy.")
    hit = recall(cache, req)
    assert hit is not None and hit.text == "Level 2, next to the pharmacy."
    answers = cache._answers
    (key,) = [k for k in answers.iterkeys()]
    before = dc.access_time(answers, key)
    dc.write_access_times(answers, [(before + 100.0, key)])
    assert dc.access_time(answers, key) == before + 100.0
    assert dc.read_live(answers, key) == answers.get(key)  # the two read paths agree


def test_a_moved_column_fails_loudly_not_as_misses(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "c"
    with _store(path) as store:
        store._sql("ALTER TABLE Cache RENAME COLUMN access_time TO last_access")
        with pytest.raises(dc.DiskcacheAssumptionError, match="assumption 3"):
            dc.check_layout(store)


def test_a_missing_private_attribute_fails_loudly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _store(tmp_path / "c") as store:
        monkeypatch.setattr(diskcache.Cache, "_sql", None, raising=False)
        with pytest.raises(dc.DiskcacheAssumptionError, match="assumption 1"):
            dc.check_layout(store)


def test_the_cache_refuses_to_run_on_a_diskcache_it_does_not_know(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An open that fails the layout check says so at ERROR and serves no stale guesses."""
    from edge.config import CacheConfig

    monkeypatch.setattr(dc, "REQUIRED_COLUMNS", dc.REQUIRED_COLUMNS | {"column_from_the_future"})
    with caplog.at_level(logging.ERROR, logger="edgecloud.cache"):
        cache = AnswerCache(CacheConfig(), tmp_path)
    assert "breaks assumption 3" in caplog.text
    assert cache.stats()["enabled"] is False
    cache.close()
