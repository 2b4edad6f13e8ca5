"""The one thread that runs every llama.cpp computation of the edge model.

llama.cpp's CPU backend parallelises each graph with OpenMP, and libgomp keeps a team of worker
threads per thread that ever ran a parallel region; a second team makes libgomp sleep at every
barrier instead of spinning (about half the decode speed, ``edge/local_model.py`` has the figures).
So loading's warm-up, prefill, decode and the batched runner's steps all run here: queued calls
first (``call``), then one step of every attached ``BatchEngine`` with work, then sleep until woken.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from .errors import APIError

if TYPE_CHECKING:
    from .batch_runner import BatchEngine

log = logging.getLogger("edgecloud.edge")


class ComputeThread:
    """The one thread that runs every llama.cpp computation: queued calls first, then batch steps."""

    def __init__(self, name: str = "llama-gen") -> None:
        self.name = name
        self._calls: collections.deque[tuple[Callable[..., Any], tuple[Any, ...], Future[Any]]] = collections.deque()
        self._engines: list[BatchEngine] = []
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def call(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` on the compute thread between two steps."""
        future: Future[Any] = Future()
        if self._closed:
            future.set_exception(RuntimeError("the compute thread is closed"))
            return future
        self._calls.append((fn, args, future))
        self._start()
        self._wake.set()
        return future

    def attach(self, engine: BatchEngine) -> None:
        with self._lock:
            if engine not in self._engines:
                self._engines.append(engine)
        self._start()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def close(self) -> None:
        """Stop after the step under way; queued calls fail and attached engines fail their requests."""
        self._closed = True
        self._wake.set()

    def join(self, timeout: float) -> bool:
        """Wait for the thread to end after ``close``; True once it has (or never started).

        The thread is a daemon, so an interpreter that exits while it is inside llama.cpp does not wait for
        it, and tearing llama.cpp down under a running graph crashes the process (a segfault at exit, seen
        when a step took longer than the shutdown). Closing the model waits here first."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._closed:
            self._wake.clear()
            ran = False
            while self._calls and not self._closed:
                fn, args, future = self._calls.popleft()
                ran = True
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn(*args))
                    except BaseException as exc:
                        future.set_exception(exc)
            busy = False
            for engine in list(self._engines):
                if engine.has_work():
                    busy = True
                    try:
                        engine.step()
                    except Exception:  # a bug must fail the requests, not kill the thread
                        log.exception("edge batch step failed")
                        engine.fail_all(APIError(500, "The on-device model failed.", "server_error", None,
                                                 "edge_generation_error"))
                elif engine.retired:
                    engine.close()
                    with self._lock:
                        self._engines.remove(engine)
            if not busy and not ran:
                self._wake.wait()
        gone = APIError(503, "The on-device model was shut down.", "server_error", None, "edge_unavailable")
        for engine in self._engines:
            engine.fail_all(gone)
            engine.close()
        self._engines.clear()
        while self._calls:
            _fn, _args, future = self._calls.popleft()
            if future.set_running_or_notify_cancel():
                future.set_exception(RuntimeError("the compute thread is closed"))
