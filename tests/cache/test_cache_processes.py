"""Two OS processes (as two gateway workers would be) sharing one cache directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edge.cache import AnswerCache
from edge.config import CacheConfig

from .conftest import ask, recall

pytestmark = pytest.mark.slow  # spawns Python processes

ROOT = Path(__file__).resolve().parents[2]
WORKER = r"""
import json, sys
sys.path.insert(0, sys.argv[4])
from pathlib import Path
from edge.cache import AnswerCache
from edge.config import CacheConfig
from cache.conftest import ask, recall, remember
cache = AnswerCache(CacheConfig(), Path(sys.argv[1]))
cache.set_fingerprint("edge=smollm2-1;cloud=none")
name, count = sys.argv[2], int(sys.argv[3])
stored = sum(remember(cache, ask(f"{name} question {i}"), f"{name} answer {i}") for i in range(count))
seen = sum(recall(cache, ask(f"{name} question {i}")) is not None for i in range(count))
print(json.dumps({"stored": stored, "seen": seen, "errors": cache.stats()["errors"]}))
cache.close()
"""


def _spawn(data_dir: Path, name: str, count: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(data_dir), name, str(count), str(ROOT / "tests")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_two_processes_write_concurrently_and_share_answers(tmp_path: Path) -> None:
    workers = [_spawn(tmp_path, name, 150) for name in ("north", "south")]
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        assert json.loads(out) == {"stored": 150, "seen": 150, "errors": 0}
    cache = AnswerCache(CacheConfig(), tmp_path)
    cache.set_fingerprint("edge=smollm2-1;cloud=none")
    try:
        for name in ("north", "south"):
            for i in (0, 77, 149):
                assert recall(cache, ask(f"{name} question {i}")).text == f"{name} answer {i}"
        assert cache.stats()["entries"] == 300
    finally:
        cache.close()


def test_an_answer_stored_by_one_process_is_served_by_a_running_other(tmp_path: Path) -> None:
    reader = AnswerCache(CacheConfig(), tmp_path)  # already open, like a second server worker
    reader.set_fingerprint("edge=smollm2-1;cloud=none")
    try:
        assert recall(reader, ask("east question 3")) is None
        worker = _spawn(tmp_path, "east", 5)
        _, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        assert recall(reader, ask("east question 3")).text == "east answer 3"
    finally:
        reader.close()
