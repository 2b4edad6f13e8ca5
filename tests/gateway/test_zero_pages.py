"""The KV cache's zero pages go back to the kernel at load (edge/zero_pages.py), and nothing else does.

First on memory this test maps itself (what is released, what is kept, contents unchanged), then on
the real runner with the embedded model: the released bytes cover the KV cache, and answers, short
and long, are the same token for token as with the feature off.
"""

from __future__ import annotations

import asyncio
import ctypes
import mmap
from pathlib import Path

import llama_cpp
import pytest

from edge import zero_pages
from edge.config import EdgeModelConfig
from edge.local_model import LocalModel, find_embedded_model
from tests.harness import edge_answer

PAGE = zero_pages.PAGE
MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(not zero_pages.supported(), reason="Linux with 4 KiB pages only")


def _private_anonymous(size: int) -> tuple[mmap.mmap, int]:
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    return region, address


def _resident_pages(address: int, size: int) -> list[bool]:
    libc = zero_pages._libc()
    vec = (ctypes.c_ubyte * (size // PAGE))()
    assert libc.mincore(address, size, vec) == 0
    return [bool(v & 1) for v in vec]


def test_new_zero_runs_are_released_and_contents_kept() -> None:
    before = zero_pages.anonymous_mappings()
    size = 16 * MIB
    region, address = _private_anonymous(size)
    try:
        region[:] = bytes(size)  # every page written: resident, as after llama.cpp's clear
        region[0:4] = b"head"
        region[10 * MIB : 10 * MIB + 4] = b"mark"  # splits the zeros into a 10 MiB and a 6 MiB run
        region[13 * MIB + 5] = 1  # ... and the second one into 3 MiB (too short) and 3 MiB
        assert all(_resident_pages(address, size))

        released = zero_pages.release_new_zero_runs(before, min_run=4 * MIB)

        assert released == 10 * MIB - PAGE  # the first page holds "head"
        resident = _resident_pages(address, size)
        assert resident[0] and not any(resident[1 : 10 * MIB // PAGE])
        assert all(resident[10 * MIB // PAGE :])  # short runs stay as they are
        # Contents are what they were: released pages read as the zeros they held.
        assert region[0:4] == b"head" and region[10 * MIB : 10 * MIB + 4] == b"mark"
        assert region[13 * MIB + 5] == 1
        assert region[PAGE : 10 * MIB] == bytes(10 * MIB - PAGE)
        region[5 * MIB] = 7  # and they are ordinary memory again
        assert region[5 * MIB] == 7
    finally:
        region.close()


def test_mappings_from_before_the_snapshot_are_left_alone() -> None:
    size = 8 * MIB
    region, address = _private_anonymous(size)
    try:
        region[:] = bytes(size)
        before = zero_pages.anonymous_mappings()
        assert zero_pages.release_new_zero_runs(before, min_run=4 * MIB) == 0
        assert all(_resident_pages(address, size))
    finally:
        region.close()


def test_anonymous_mappings_reads_only_private_unnamed_writable(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "7f0000000000-7f0000400000 rw-p 00000000 00:00 0 \n"
        "7f0000400000-7f0000800000 rw-s 00000000 00:01 12 /dev/zero (deleted)\n"
        "7f0000800000-7f0000900000 r-xp 00000000 08:01 99 /usr/lib/libc.so.6\n"
        "55d000000000-55d000100000 rw-p 00000000 00:00 0 [heap]\n"
        "7f0000900000-7f0000a00000 r--p 00000000 00:00 0 \n"
    )
    assert zero_pages.anonymous_mappings(maps) == {(0x7F0000000000, 0x7F0000400000)}


def test_no_memory_map_means_nothing_is_released(tmp_path: Path) -> None:
    assert zero_pages.snapshot(tmp_path / "missing") is None
    assert zero_pages.release_new_zero_runs(None) == 0


def test_a_mapping_unmapped_before_it_is_read_is_skipped_not_a_crash() -> None:
    """Another thread may free a mapping between the map's reading and the zero check (an onnxruntime
    session loading beside the model does). Residency said yes, the pages are gone: the scan must
    find no run, where a pointer read would kill the process with SIGSEGV."""
    size = 8 * MIB
    region, address = _private_anonymous(size)
    region[:] = bytes(size)
    region.close()  # unmapped now

    class StaleResidency:  # mincore as it answered a moment before the unmapping
        def mincore(self, low, length, vec) -> int:
            for index in range(length // PAGE):
                vec[index] = 1
            return 0

    with zero_pages.MemoryReader() as reader:
        assert reader.read(address, PAGE) is None
        assert zero_pages.zero_runs(address, address + size, 4 * MIB, StaleResidency(), reader) == []
    # And the real mincore answers ENOMEM for it: no run either.
    assert zero_pages.zero_runs(address, address + size, 4 * MIB) == []


# ----- the real runner ---------------------------------------------------------------------------
needs_model = pytest.mark.skipif(find_embedded_model() is None, reason="embedded model not installed")
cpu_build = pytest.mark.skipif(llama_cpp.llama_supports_gpu_offload(), reason="lazy KV memory is for CPU builds")


@needs_model
@cpu_build
def test_runner_releases_the_kv_cache_and_answers_the_same() -> None:
    long_question = "Which gate does the evening flight to Lisbon leave from? " * 60  # ~800 tokens

    async def run(lazy: bool) -> tuple[int, list[str]]:
        edge = LocalModel(EdgeModelConfig(n_ctx=2048, lazy_kv_memory=lazy))
        await edge.load()
        assert edge.model is not None, edge.load_error
        answers = []
        for text, n in (("Where is the taxi rank?", 24), (long_question, 16), ("Where is the pharmacy?", 24)):
            answer, finish = await edge_answer(edge, text, max_tokens=n, temperature=0.0)
            assert finish.finish_reason in ("stop", "length")
            answers.append(answer)
        released = edge.model.kv_bytes_released
        await edge.aclose()
        return released, answers

    async def scenario() -> None:
        released, lazy_answers = await run(True)
        # SmolLM2-135M: 30 layers x (192 q8_0 key + 192 f16 value numbers) per cell, 2048 cells = 34 MB.
        assert released >= 30 * MIB
        off, eager_answers = await run(False)
        assert off == 0
        assert lazy_answers == eager_answers and all(lazy_answers)

    asyncio.run(scenario())


@needs_model
@pytest.mark.parametrize("gpu_build", [False, True])
def test_gpu_offload_and_gpu_builds_are_left_alone(gpu_build: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if gpu_build:  # a CUDA build (the Jetson's), even with no layer offloaded: pinned host buffers
        monkeypatch.setattr(llama_cpp.llama_cpp, "llama_supports_gpu_offload", lambda: True)

    async def scenario() -> None:
        layers = 0 if gpu_build else -1  # a CPU build ignores the offload itself
        edge = LocalModel(EdgeModelConfig(n_ctx=512, n_gpu_layers=layers))
        await edge.load()
        assert edge.model is not None, edge.load_error
        assert edge.model.kv_bytes_released == 0
        await edge.aclose()

    asyncio.run(scenario())


@needs_model
@cpu_build
def test_a_hot_swap_releases_the_new_context_too() -> None:
    async def scenario() -> None:
        edge = LocalModel(EdgeModelConfig(n_ctx=2048))
        await edge.load()
        assert edge.model is not None, edge.load_error
        before, _ = await edge_answer(edge, "Where is the taxi rank?", max_tokens=16, temperature=0.0)
        await edge.swap(Path(str(edge.model_path)), "same-file-again")  # read beside the old model
        assert edge.model.version == "same-file-again"
        assert edge.model.kv_bytes_released >= 30 * MIB
        after, _ = await edge_answer(edge, "Where is the taxi rank?", max_tokens=16, temperature=0.0)
        assert after == before and after
        await edge.aclose()

    asyncio.run(scenario())


@needs_model
@cpu_build
def test_other_threads_buffers_survive_a_release_during_their_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread loads and writes while a context is created: the classifier loads beside the model,
    a hot swap loads while generation runs. Its new buffers are resident and zero at the moment of the
    release (the worst case: they look like a cleared KV cache), and it keeps writing to them throughout.
    The release must take only the KV cache: the other thread's pages stay resident and every value it
    wrote reads back."""
    # A mapping the loader creates may land beside the KV cache's and merge with it; then no zero run has the
    # expected size and nothing is released (the safe outcome, but not the case under test), so a run that
    # released nothing is tried again. Every run checks the other thread's pages.
    released = 0
    for _ in range(3):
        released = _release_beside_a_loader(monkeypatch)
        if released:
            break
    # Exactly the KV cache was given back (34.5 MiB here), and none of the other thread's 32 MiB.
    assert released >= 30 * MIB and released <= 36 * MIB


def _release_beside_a_loader(monkeypatch: pytest.MonkeyPatch) -> int:
    """One model load and release while another thread loads the classifier and writes to its own buffers;
    returns the bytes released, having checked that none of the other thread's pages went."""
    import threading

    from models.intent.runtime import IntentClassifier

    started, stop = threading.Event(), threading.Event()
    mine: list[tuple[mmap.mmap, int]] = []
    lost: list[str] = []
    original_snapshot = zero_pages.snapshot

    def snapshot_then_allocate(*args, **kwargs):  # the other thread allocates right after the snapshot
        taken = original_snapshot(*args, **kwargs)
        started.set()
        while len(mine) < 2:
            stop.wait(0.005)
        return taken

    def other_loader() -> None:
        started.wait(60)
        for _ in range(2):
            region, address = _private_anonymous(16 * MIB)
            region[:] = bytes(16 * MIB)  # resident zeros, as a cleared buffer
            # One byte in its first and last page: the kernel may merge this mapping with the KV cache's
            # when they lie side by side, and a zero run spanning both fits no expected size, so nothing
            # would be released (the safe outcome, but not the case under test). The 16 MiB - 2 pages
            # between them stay zero: a cleared buffer of another size, which the release must leave.
            region[0] = region[16 * MIB - 1] = 1
            mine.append((region, address))
        IntentClassifier.load(None)  # a real load beside the model's, as in the gateway's lifespan
        rounds = 0
        written = mine[1][0]  # the first region stays all zero; the second is written all along
        while not stop.is_set() or rounds < 3:
            for region in (written,):  # write a value to every 64th page, then read them all back
                for page in range(0, 16 * MIB, 64 * PAGE):
                    region[page] = rounds % 250 + 1
                for page in range(0, 16 * MIB, 64 * PAGE):
                    if region[page] != rounds % 250 + 1:
                        lost.append(f"round {rounds}, page {page // PAGE}")
            rounds += 1

    monkeypatch.setattr(zero_pages, "snapshot", snapshot_then_allocate)
    thread = threading.Thread(target=other_loader)
    thread.start()

    async def scenario() -> int:
        edge = LocalModel(EdgeModelConfig(n_ctx=2048, parallel=1))  # one slot: one 34.5 MiB KV cache
        await edge.load()
        assert edge.model is not None, edge.load_error
        released = edge.model.kv_bytes_released
        await edge.aclose()
        return released

    try:
        released = asyncio.run(scenario())
    finally:
        stop.set()
        thread.join(120)
    assert not lost, lost[:5]
    for region, address in mine:
        assert all(_resident_pages(address, 16 * MIB)), "the release dropped another thread's pages"
        region.close()
    monkeypatch.setattr(zero_pages, "snapshot", original_snapshot)
    return released


def test_release_takes_only_runs_of_the_expected_size() -> None:
    before = zero_pages.anonymous_mappings()
    kv, other = _private_anonymous(12 * MIB), _private_anonymous(8 * MIB)
    try:
        for region, _ in (kv, other):
            region[:] = bytes(len(region))
            region[0:8] = b"mallochd"  # as the allocator's chunk header starts each of its mappings
        released = zero_pages.release_new_zero_runs(before, min_run=4 * MIB, expected_bytes=12 * MIB)
        assert released == 12 * MIB - PAGE
        assert all(_resident_pages(other[1], 8 * MIB))  # the 8 MiB buffer is someone else's
        assert not any(_resident_pages(kv[1], 12 * MIB)[1:])
    finally:
        kv[0].close()
        other[0].close()
