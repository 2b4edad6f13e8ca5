"""Give the zero-filled pages of a fresh llama.cpp context back to the kernel.

Why: llama.cpp allocates the KV cache for all ``n_ctx`` cells (34 MB for the embedded model at
``n_ctx`` 2048) and fills it with zeros at once "to avoid NaNs in the padding"
(``src/llama-kv-cache.cpp``). Filling makes every page resident, so the process holds the memory of
a full context before the first question, although a kiosk's contexts are a few hundred tokens. On
Linux, ``madvise(MADV_DONTNEED)`` drops a private anonymous page and the next read of it maps zeros
again: exactly what llama.cpp wrote. The cache keeps its contents; its memory is committed as cells
fill, and a context that fills every cell costs what it did before. Measured with
``bench/edge_overhead.py`` (README): the gateway's resident memory at ready fell by about 36 MB.

What makes it safe:
- Only the KV cache's own buffer. Other threads allocate while a context is created (the intent
  classifier loads beside the model; a hot swap loads while generation runs), and a write of theirs
  landing between the zero check and ``madvise`` would be lost. So the release takes only a run of
  resident, entirely zero pages, in a private anonymous mapping that appeared while the context was
  created (a snapshot before it, compared after), whose length is the KV cache's size as computed from
  the model's shape and the cache types (``expected_kv_bytes``, within ``KV_SLACK``). No other buffer
  has that size; where no run matches, nothing is released.
- It runs before the context's first decode, when nothing else has the buffer's address.
- Memory is read through ``/proc/self/mem`` (``MemoryReader``), and only in mappings big enough to
  hold the buffer: a mapping another thread frees while it is scanned fails a read (nothing
  released) instead of killing the process.
- Linux and CPU-only llama.cpp builds only (the runner checks; a GPU backend's pinned host buffers
  belong to the driver), and any failure leaves memory as it was: the result is then 0.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from pathlib import Path

log = logging.getLogger("edgecloud.edge")

PAGE = 4096
MIN_RUN = 4 * 1024 * 1024
_MADV_DONTNEED = 4
_ZERO_PAGE = bytes(PAGE)

Mapping = tuple[int, int]


# bytes per element of the KV cache types (q8_0: 34-byte blocks of 32; q4_0: 18-byte blocks of 32)
_TYPE_BYTES = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
KV_SLACK = 64 * 1024


def expected_kv_bytes(llama: object, type_k: str, type_v: str) -> int | None:
    """The size of a llama.cpp context's KV cache buffer, from the model's shape and the cache types.

    Keys and values of every layer: ``n_ctx * n_embd_{k,v}_gqa * bytes per element``, where
    ``n_embd_k_gqa = head_count_kv * key_length``. None when the GGUF does not say enough (then nothing
    is released). Models with sliding-window or recurrent layers have other caches and do not match.
    """
    try:
        meta = llama.metadata  # type: ignore[attr-defined]
        arch = meta["general.architecture"]
        layers = int(meta[f"{arch}.block_count"])
        heads = int(meta[f"{arch}.attention.head_count"])
        heads_kv = int(meta.get(f"{arch}.attention.head_count_kv", heads))
        embd = int(meta[f"{arch}.embedding_length"])
        key_len = int(meta.get(f"{arch}.attention.key_length", embd // heads))
        value_len = int(meta.get(f"{arch}.attention.value_length", embd // heads))
        n_ctx = int(llama.n_ctx())  # type: ignore[attr-defined]
    except (KeyError, ValueError, TypeError, AttributeError, ZeroDivisionError):
        return None
    per_cell = heads_kv * (key_len * _TYPE_BYTES[type_k] + value_len * _TYPE_BYTES[type_v])
    return int(n_ctx * layers * per_cell)


def supported() -> bool:
    """Linux with 4 KiB pages: the only place the page arithmetic below holds."""
    if not sys.platform.startswith("linux"):
        return False
    import resource

    return resource.getpagesize() == PAGE


def anonymous_mappings(maps: Path = Path("/proc/self/maps")) -> set[Mapping]:
    """The address ranges of this process's private, writable, anonymous mappings."""
    found: set[Mapping] = set()
    with maps.open() as lines:
        for line in lines:
            fields = line.split()
            # An anonymous mapping has no path (the sixth field); "[heap]" and "[stack]" are named.
            if len(fields) == 5 and fields[1] == "rw-p":
                low, high = (int(part, 16) for part in fields[0].split("-"))
                found.add((low, high))
    return found


def snapshot(maps: Path = Path("/proc/self/maps")) -> set[Mapping] | None:
    """``anonymous_mappings``, or None where they cannot be read (then nothing will be released)."""
    try:
        return anonymous_mappings(maps)
    except (OSError, ValueError) as exc:
        log.debug("no memory map to compare with, zero pages stay: %s", exc)
        return None


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


class MemoryReader:
    """Reads this process's memory through ``/proc/self/mem``, never through a raw pointer.

    Why not ``ctypes.string_at``: other threads allocate and free while a context is created (the
    intent classifier's onnxruntime sessions load beside the model), and a mapping found new in
    ``/proc/self/maps`` may be unmapped before it is read. A pointer read of it kills the process with
    SIGSEGV; a read of ``/proc/self/mem`` fails with EIO, and the pages are then treated as not zero
    (nothing released). The caller closes the reader.
    """

    CHUNK = 64 * PAGE

    def __init__(self, path: str = "/proc/self/mem") -> None:
        self._fd = os.open(path, os.O_RDONLY)

    def read(self, address: int, size: int) -> bytes | None:
        """``size`` bytes at ``address``, or None where any of them cannot be read (unmapped now)."""
        try:
            data = os.pread(self._fd, size, address)
        except OSError:
            return None
        return data if len(data) == size else None

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> MemoryReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def zero_runs(low: int, high: int, min_run: int = MIN_RUN, libc: ctypes.CDLL | None = None,
              reader: MemoryReader | None = None) -> list[Mapping]:
    """Runs of resident, all-zero pages in ``[low, high)`` at least ``min_run`` bytes long.

    Residency comes from ``mincore`` first, so pages never touched are not read (and not faulted in).
    A range unmapped meanwhile has no runs: ``mincore`` fails with ENOMEM, or its pages cannot be read.
    """
    libc = libc or _libc()
    pages = (high - low) // PAGE
    resident = (ctypes.c_ubyte * pages)()
    if libc.mincore(low, high - low, resident) != 0:
        return []  # gone since the map was read (ENOMEM), or not ours to look at
    own_reader = reader is None
    reader = reader or MemoryReader()
    try:
        zero_pages = _zero_pages(low, pages, resident, reader)
    finally:
        if own_reader:
            reader.close()
    runs: list[Mapping] = []
    start: int | None = None
    for index in range(pages + 1):
        zero = index < pages and zero_pages[index]
        if zero and start is None:
            start = index
        elif not zero and start is not None:
            if (index - start) * PAGE >= min_run:
                runs.append((low + start * PAGE, low + index * PAGE))
            start = None
    return runs


def _zero_pages(low: int, pages: int, resident: ctypes.Array, reader: MemoryReader) -> list[bool]:
    """For each page: resident and all zero. Read a chunk at a time; a chunk that cannot be read is
    not zero."""
    zero = [False] * pages
    per_chunk = MemoryReader.CHUNK // PAGE
    for first in range(0, pages, per_chunk):
        last = min(pages, first + per_chunk)
        if not any(resident[index] & 1 for index in range(first, last)):
            continue
        data = reader.read(low + first * PAGE, (last - first) * PAGE)
        if data is None:
            continue
        for index in range(first, last):
            offset = (index - first) * PAGE
            zero[index] = bool(resident[index] & 1) and data[offset:offset + PAGE] == _ZERO_PAGE
    return zero


def fits(run_bytes: int, expected_bytes: int | None) -> bool:
    """Is a zero run the buffer of ``expected_bytes``? (None: any run; tests of the mechanism only.)

    The run may miss the buffer's first page (the allocator's header shares it) and include the zero
    tail of its last one, and ggml pads every tensor to its alignment: a few pages either way.
    """
    if expected_bytes is None:
        return True
    slack = KV_SLACK + expected_bytes // 100
    return expected_bytes - slack <= run_bytes <= expected_bytes + slack


def release_new_zero_runs(before: set[Mapping] | None, min_run: int = MIN_RUN,
                          expected_bytes: int | None = None) -> int:
    """Drop the zero runs of the anonymous mappings new since ``before`` that are ``expected_bytes``
    long (the KV cache's size, ``expected_kv_bytes``); bytes released.

    Call it on the thread that just created the context, before that context's first decode.
    ``before`` None (no snapshot could be taken) releases nothing.
    """
    if before is None:
        return 0
    try:
        libc = _libc()
        released = 0
        smallest = max(min_run, _smallest_fit(expected_bytes))
        with MemoryReader() as reader:
            for low, high in sorted(anonymous_mappings() - before):
                if high - low < smallest:
                    continue  # too small to hold the buffer: not even read
                released += _release_runs(low, high, min_run, expected_bytes, libc, reader)
        return released
    except (OSError, ValueError, AttributeError) as exc:  # no /proc, no mincore: leave memory as it is
        log.debug("zero pages not released: %s", exc)
        return 0


def _smallest_fit(expected_bytes: int | None) -> int:
    if expected_bytes is None:
        return 0
    return expected_bytes - KV_SLACK - expected_bytes // 100


def _release_runs(low: int, high: int, min_run: int, expected_bytes: int | None, libc: ctypes.CDLL,
                  reader: MemoryReader) -> int:
    released = 0
    for start, end in zero_runs(low, high, min_run, libc, reader):
        if not fits(end - start, expected_bytes):
            continue  # some other buffer: another thread may be writing it right now
        if libc.madvise(start, end - start, _MADV_DONTNEED) == 0:
            released += end - start
    return released


__all__ = ["KV_SLACK", "MIN_RUN", "PAGE", "MemoryReader", "anonymous_mappings", "expected_kv_bytes", "fits",
           "release_new_zero_runs", "snapshot", "supported", "zero_runs"]
