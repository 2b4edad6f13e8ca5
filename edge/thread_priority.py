"""Lower the calling thread's CPU priority, so that llama.cpp's threads yield to the event loop.

The router decides every request on the event loop in well under a millisecond, but only when it gets a core.
While llama.cpp decodes another kiosk's answer it runs an OpenMP team on every core, and the scheduler gives
the event loop no head start over it: with both cores of a 2-vCPU machine held, the decision's P99 rises from
about 0.6 ms to 4.5-4.8 ms (``bench/route_overhead.py --busy-cores 2``; docs/intent.md, *Latency*). A higher
nice value on the decoding threads lets the loop preempt them when it wakes, and costs the decode only the
time the loop actually runs.

Rules this module keeps:
- Linux only: there a nice value belongs to a thread, and a thread inherits its creator's, so the OpenMP (or
  ggml) worker threads that llama.cpp starts from the compute thread inherit the value set here, provided it
  is set before that thread runs its first computation. Elsewhere (``setpriority`` there acts on the whole
  process) nothing changes.
- Only ever lower: the value is added to the thread's current nice (as ``nice -n`` does), capped at 19, so a
  service started at another nice keeps its offset and no privilege is needed. Raising a priority again would
  need CAP_SYS_NICE, which the edge service does not have.
- Never fatal: a refusal (a seccomp filter, a container's policy) is logged and the thread runs as it was.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger("edgecloud.edge")

MAX_NICE = 19


def lower_current_thread(increment: int) -> int | None:
    """Add ``increment`` to the calling thread's nice value (capped at 19); return the new value.

    Returns None where nothing changed: ``increment`` is 0 or less, the platform is not Linux, or the
    kernel refused.
    """
    if increment <= 0 or not sys.platform.startswith("linux"):
        return None
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        target = min(MAX_NICE, current + increment)
        os.setpriority(os.PRIO_PROCESS, tid, target)
    except OSError as exc:
        log.warning("could not lower the priority of thread %s by %d: %s", threading.current_thread().name,
                    increment, exc)
        return None
    return target


def thread_nice(tid: int) -> int | None:
    """The nice value of thread ``tid`` of this process (Linux), or None where it cannot be read."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return os.getpriority(os.PRIO_PROCESS, tid)
    except OSError:
        return None
