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
- Only private anonymous mappings that appeared while the context was created (a snapshot before it,
  compared after), only pages that are resident and entirely zero, and only runs of at least
  ``min_run`` bytes (4 MiB): a cleared buffer, not a page of some other allocation that happens to be
  zero for a moment.
- It runs before the context's first decode, when nothing else has the buffer's address.
- Linux and CPU-only llama.cpp builds only (the runner checks; a GPU backend's pinned host buffers
  belong to the driver), and any failure leaves memory as it was: the result is then 0.
"""

from __future__ import annotations

import ctypes
import logging
import sys
from pathlib import Path

log = logging.getLogger("edgecloud.edge")

PAGE = 4096
MIN_RUN = 4 * 1024 * 1024
_MADV_DONTNEED = 4
_ZERO_PAGE = bytes(PAGE)

Mapping = tuple[int, int]


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


def zero_runs(low: int, high: int, min_run: int = MIN_RUN, libc: ctypes.CDLL | None = None) -> list[Mapping]:
    """Runs of resident, all-zero pages in ``[low, high)`` at least ``min_run`` bytes long.

    Residency comes from ``mincore`` first, so pages never touched are not read (and not faulted in).
    """
    libc = libc or _libc()
    pages = (high - low) // PAGE
    resident = (ctypes.c_ubyte * pages)()
    if libc.mincore(low, high - low, resident) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed")
    runs: list[Mapping] = []
    start: int | None = None
    for index in range(pages + 1):
        zero = (
            index < pages
            and resident[index] & 1
            and ctypes.string_at(low + index * PAGE, PAGE) == _ZERO_PAGE
        )
        if zero and start is None:
            start = index
        elif not zero and start is not None:
            if (index - start) * PAGE >= min_run:
                runs.append((low + start * PAGE, low + index * PAGE))
            start = None
    return runs


def release_new_zero_runs(before: set[Mapping] | None, min_run: int = MIN_RUN) -> int:
    """Drop the zero runs of the anonymous mappings that are new since ``before``; bytes released.

    Call it on the thread that just created the context, before that context's first decode.
    ``before`` None (no snapshot could be taken) releases nothing.
    """
    if before is None:
        return 0
    try:
        libc = _libc()
        released = 0
        for low, high in sorted(anonymous_mappings() - before):
            for start, end in zero_runs(low, high, min_run, libc):
                if libc.madvise(start, end - start, _MADV_DONTNEED) == 0:
                    released += end - start
        return released
    except (OSError, ValueError, AttributeError) as exc:  # no /proc, no mincore: leave memory as it is
        log.debug("zero pages not released: %s", exc)
        return 0


__all__ = ["MIN_RUN", "PAGE", "anonymous_mappings", "release_new_zero_runs", "snapshot", "supported", "zero_runs"]
