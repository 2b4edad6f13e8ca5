"""Continuous batching: every active sequence of the edge model advances in one llama.cpp batch per step.

Why it is built this way:
- Decoding one token costs about as much as decoding a handful at once: the step reads every weight
  either way, and on a Jetson (and on this kind of CPU) that read is what takes the time. So the
  runner keeps ``parallel`` slots, each a llama.cpp sequence, and one step decodes the next token of
  every slot that is answering, plus a piece of the prompt of every slot that is still reading one.
- A request joins at the next step, a finished or cancelled one leaves at the end of its step; the
  others never wait for a whole answer. Past the slots, requests wait in a bounded queue (the caller
  answers 503 + Retry-After past it).
- A long prompt is read in chunks: while other slots are answering, a step takes at most
  ``prefill_chunk`` prompt tokens, so their next token is never held up by more than one chunk.
  With nothing else answering, a step takes up to ``n_batch`` (the fastest way to the first token).
- KV prefix reuse: a finished slot keeps its cells until a new request needs the slot, and a new
  request goes to the free slot that already holds the longest prefix of its prompt (the least
  recently used among equals), so a kiosk's system prompt is read once per slot, then reused.
- By default each slot has its own KV cells (llama.cpp's per-sequence streams, ``n_ctx`` each). In
  one unified cache (``[edge] kv_unified = true``) slots also share a common prompt's cells through
  ``llama_memory_seq_cp`` (tagged, not copied): a system prompt is then read once and stored once
  for all slots, and a request whose prompt shares a long prefix with one that another slot is still
  reading waits for that reading instead of doing it twice. The price: in a unified cache a
  sequence's cells can sit out of position order (freed cells are reused first), flash attention
  then adds its f16 values in another order, and an answer can differ from the same request alone
  (measured: logits off by up to 0.4). Per-slot streams keep every answer exactly what it is alone.
- Each slot has its own sampler chain (settings, seed, and room for a grammar), taken from a pool
  of reset chains: a new chain per request made the process grow (glibc keeps freed pieces).
- Every llama.cpp computation runs on one thread, ``ComputeThread`` (``edge/compute_thread.py``; see
  ``edge/local_model.py`` for the OpenMP reason). Loading, warm-up and hot swaps queue their calls on it between steps.
- Same answer alone or in company (per-slot streams): a token's logits depend only on its own
  sequence's cells, in position order, and llama.cpp's CPU kernels compute each row on its own, so a
  greedy or seeded request gives the same tokens whatever runs beside it and however its prompt was
  cut into chunks (``tests/gateway/test_batching.py`` checks it on the real model).

Every use of llama-cpp-python's low-level API goes through ``models/llama_runtime.py``.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import contextlib
import logging
import threading
import time
from typing import Any

from models import llama_runtime as ll

from .decoding import SamplerPool, Sampling, StopScanner
from .errors import APIError
from .types import Finish, TextDelta, Usage

log = logging.getLogger("edgecloud.edge")

# A request waits for another slot's prompt reading only when that saves at least this many tokens.
MIN_SHARED_WAIT = 16


class SeqJob:
    """One request's generation, shared between the event loop (its queue) and the compute thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, prompt: list[int], max_tokens: int, sampling: Sampling,
                 stop: list[str], queued_at: float) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.cancel = threading.Event()
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.sampling = sampling
        self.stop = stop
        self.queued_at = queued_at
        # Compute-thread state.
        self.chain: ll.SamplerChain | None = None
        self.admitted_at = 0.0
        self.first_at: float | None = None
        self.reused = 0
        self.n_out = 0
        self.next_token: int | None = None  # sampled, to be decoded at the next step
        self.wait: tuple[Slot, SeqJob, int] | None = None  # (slot, its job, prefix length) being read in
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.scanner = StopScanner(stop)
        self.recent: list[int] = []
        self.done = False

    def put(self, item: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the event loop is closed (shutdown): nobody is listening any more
            self.cancel.set()


class Slot:
    """One llama.cpp sequence: the tokens whose KV cells it holds (positions 0..n-1), and its request."""

    __slots__ = ("job", "last_used", "seq_id", "tokens")

    def __init__(self, seq_id: int) -> None:
        self.seq_id = seq_id
        self.tokens: list[int] = []
        self.job: SeqJob | None = None
        self.last_used = 0.0


def common_prefix(a: list[int], b: list[int], limit: int) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if n >= limit or x != y:
            break
        n += 1
    return n


class Stats:
    """Running figures for the router's wait estimate and the metrics (written by the compute thread)."""

    def __init__(self) -> None:
        self.step_s = 0.02  # one decode step of the current batch
        self.prefill_s = 0.1  # admission to first token
        self.out_tokens = 64.0  # tokens per answer
        self.batch_tokens = 0  # tokens in the last step's batch
        self.batch_sequences = 0  # sequences in the last step's batch
        self.steps = 0
        self.tokens_total = 0

    @staticmethod
    def ema(old: float, new: float, weight: float = 0.2) -> float:
        return (1 - weight) * old + weight * new


class BatchEngine:
    """The slots and the batch of one loaded model; ``step`` runs on the compute thread only."""

    def __init__(self, loaded: Any, parallel: int, n_ctx: int, n_batch: int, prefill_chunk: int,
                 stats: Stats | None = None, share_prefixes: bool = False) -> None:
        llama = loaded.llama
        self.loaded = loaded
        self.llama = llama
        self.parallel = parallel
        self.n_ctx = n_ctx
        self.prefill_chunk = max(1, min(prefill_chunk, n_batch))
        self.batch = ll.Batch(llama, n_batch)
        self.memory = ll.Memory(llama)
        self.ctx = ll.context(llama)
        self.slots = [Slot(i) for i in range(parallel)]
        self.pending: collections.deque[SeqJob] = collections.deque()
        self.samplers = SamplerPool(llama)
        self.stats = stats or Stats()
        self.share_prefixes = share_prefixes  # a unified KV cache: slots may share prompt cells
        self.retired = False
        self._closed = False

    # ----- event-loop side ----------------------------------------------------------------------
    def submit(self, job: SeqJob) -> None:
        self.pending.append(job)

    @property
    def waiting(self) -> int:
        """Requests that will find no free slot (submitted ones not yet admitted take the free ones first)."""
        return max(0, len(self.pending) - (self.parallel - self.busy_slots))

    @property
    def busy_slots(self) -> int:
        return sum(1 for s in self.slots if s.job is not None)

    def expected_ttft_s(self) -> float:
        """When a request arriving now would see its first token.

        A free slot: the step in progress, then the prompt reading of the requests ahead of it and its
        own (they share steps, so this is an upper bound). No free slot: first the wait until a slot
        frees, from the answers in progress (their tokens left at the current step time), and a whole
        answer per round of waiters beyond the slots.
        """
        st = self.stats
        ahead = len(self.pending)
        free = self.parallel - self.busy_slots
        if ahead < free:
            return st.step_s + (ahead + 1) * st.prefill_s
        left = sorted(
            max(0.0, min(job.max_tokens, st.out_tokens) - job.n_out) * st.step_s
            for job in (s.job for s in self.slots) if job is not None
        ) or [0.0]
        rounds, index = divmod(ahead - free, max(1, len(left)))
        return left[index] + rounds * st.out_tokens * st.step_s + st.step_s + st.prefill_s

    # ----- compute-thread side ------------------------------------------------------------------
    def has_work(self) -> bool:
        return bool(self.pending) or any(s.job is not None for s in self.slots)

    def warm_up(self, token: int) -> None:
        """One decode of one token (reads every weight once), then the cache is emptied again."""
        self.batch.clear()
        self.batch.add(token, 0, 0, False)
        self.batch.decode()
        self.memory.remove(0, 0)

    def step(self) -> None:
        now = time.perf_counter()
        self._drop_cancelled(now)
        self._admit(now)
        self._resolve_waits()
        batch = self.batch
        batch.clear()
        outputs: list[tuple[Slot, int]] = []
        decoding = [s for s in self.slots if s.job is not None and s.job.next_token is not None]
        for s in decoding:
            outputs.append((s, batch.add(s.job.next_token, len(s.tokens), s.seq_id, True)))  # type: ignore[union-attr,arg-type]
        budget = batch.capacity - batch.n
        if decoding:
            budget = min(budget, self.prefill_chunk)
        reading = sorted((s for s in self.slots if s.job is not None and s.job.next_token is None
                          and s.job.wait is None), key=lambda s: s.job.admitted_at)  # type: ignore[union-attr]
        added: list[tuple[Slot, list[int]]] = []
        for s in reading:
            if budget <= 0:
                break
            prompt = s.job.prompt  # type: ignore[union-attr]
            start = len(s.tokens)
            take = prompt[start: start + budget]
            last = start + len(take) == len(prompt)
            batch.add_many(take, start, s.seq_id, last)
            if last:
                outputs.append((s, batch.n - 1))
            added.append((s, take))
            budget -= len(take)
        if batch.n == 0:
            return
        started = time.perf_counter()
        rc = batch.decode()
        if rc == 1:  # no free cells: give back what finished slots keep, then try once more
            for s in self.slots:
                if s.job is None and s.tokens:
                    self.memory.remove(s.seq_id, 0)
                    s.tokens = []
            rc = batch.decode()
        if rc != 0:
            involved = {s for s, _ in outputs} | {s for s, _ in added}
            for s in involved:
                self.memory.remove(s.seq_id, len(s.tokens))  # a failed decode may leave part of it behind
                status, code = (503, "edge_busy") if rc == 1 else (500, "edge_generation_error")
                self._fail(s, APIError(status, f"The on-device model could not decode (llama_decode {rc}).",
                                       "server_error", None, code))
            return
        done = time.perf_counter()
        st = self.stats
        st.steps += 1
        st.tokens_total += batch.n
        st.batch_tokens, st.batch_sequences = batch.n, len(decoding) + len(added)
        if decoding:
            st.step_s = st.ema(st.step_s, done - started)
        for s in decoding:
            s.tokens.append(s.job.next_token)  # type: ignore[union-attr,arg-type]
            s.job.next_token = None  # type: ignore[union-attr]
        for s, take in added:
            s.tokens.extend(take)
        for s, index in outputs:
            job = s.job
            if job is None or job.chain is None:
                continue
            self._emit(s, job, job.chain.sample(self.ctx, index), done)

    def _emit(self, s: Slot, job: SeqJob, token: int, now: float) -> None:
        if job.first_at is None:
            job.first_at = now
        if self.loaded.eog(token):
            self._finish(s, "stop", now)
            return
        job.n_out += 1
        raw = self.llama.detokenize([token], prev_tokens=job.recent[-8:] or None, special=False)
        job.recent.append(token)
        piece = job.decoder.decode(raw)
        if piece:
            text, stopped = job.scanner.feed(piece)
            if text:
                job.put(TextDelta(text))
            if stopped:
                self._finish(s, "stop", now, stopped=True)
                return
        if job.n_out >= job.max_tokens:
            self._finish(s, "length", now)
            return
        job.next_token = token

    def _finish(self, s: Slot, reason: str, now: float, stopped: bool = False) -> None:
        job = s.job
        assert job is not None
        if reason != "cancelled":
            tail = job.decoder.decode(b"", final=True)
            rest = "" if stopped else job.scanner.flush() + tail
            if rest:
                job.put(TextDelta(rest))
        first = job.first_at or now
        decode_s = max(now - first, 1e-9)
        timings = {
            "queue": (job.admitted_at - job.queued_at) * 1000.0,
            "prefill": (first - job.admitted_at) * 1000.0,
            "decode": decode_s * 1000.0,
            "prompt_tokens_reused": float(job.reused),
            "tokens_per_s": (job.n_out - 1) / decode_s if job.n_out > 1 else 0.0,
        }
        st = self.stats
        if job.first_at is not None:
            st.prefill_s = st.ema(st.prefill_s, first - job.admitted_at)
        if reason != "cancelled":
            st.out_tokens = st.ema(st.out_tokens, float(job.n_out))
        job.put(Finish(reason, Usage(len(job.prompt), job.n_out), timings, self.loaded.name))
        self._release(s, now)

    def _fail(self, s: Slot, exc: APIError) -> None:
        job = s.job
        if job is not None:
            job.put(exc)
        self._release(s, time.perf_counter())

    def _release(self, s: Slot, now: float) -> None:
        job = s.job
        if job is not None:
            job.done = True
            if job.chain is not None:
                self.samplers.give(job.chain)
                job.chain = None
        s.job = None
        s.last_used = now

    def fail_all(self, exc: APIError) -> None:
        for s in self.slots:
            if s.job is not None:
                self.memory.remove(s.seq_id, len(s.tokens))
                self._fail(s, exc)
        while self.pending:
            self.pending.popleft().put(exc)

    def _drop_cancelled(self, now: float) -> None:
        for s in self.slots:
            if s.job is not None and s.job.cancel.is_set():
                self._finish(s, "cancelled", now)
        # In place: the event loop may be appending to this deque right now.
        for job in [job for job in self.pending if job.cancel.is_set()]:
            with contextlib.suppress(ValueError):
                self.pending.remove(job)

    def _admit(self, now: float) -> None:
        while self.pending:
            free = [s for s in self.slots if s.job is None]
            if not free:
                return
            job = self.pending.popleft()
            if job.cancel.is_set():
                continue
            try:
                job.chain = self.samplers.take(job.sampling)
            except ValueError as exc:
                job.put(APIError(400, f"Invalid grammar: {exc}.", "invalid_request_error", "grammar",
                                 "invalid_grammar"))
                continue
            prompt = job.prompt
            limit = len(prompt) - 1  # the last prompt token is always decoded: its logits give the first token
            # The free slot that already holds the most of this prompt; among equals, the least recently used.
            slot = max(free, key=lambda s: (common_prefix(s.tokens, prompt, limit), -s.last_used))
            own = common_prefix(slot.tokens, prompt, limit)
            src, best = None, own
            for s in self.slots if self.share_prefixes else ():
                n = common_prefix(s.tokens, prompt, limit) if s is not slot else 0
                if n > best:
                    src, best = s, n
            if src is not None:  # another slot holds more of it: share those cells
                self.memory.remove(slot.seq_id, 0)
                self.memory.share(src.seq_id, slot.seq_id, best)
                slot.tokens = src.tokens[:best]
            else:
                self.memory.remove(slot.seq_id, own)
                del slot.tokens[own:]
            job.reused = len(slot.tokens)
            job.admitted_at = now
            # A longer prefix that another slot is reading in right now: wait for it rather than read it twice.
            for s in self.slots if self.share_prefixes else ():
                other = s.job
                if other is None or other.next_token is not None or other.first_at is not None:
                    continue
                n = common_prefix(other.prompt, prompt, limit)
                if n >= job.reused + MIN_SHARED_WAIT and n > len(s.tokens):
                    job.wait = (s, other, n)
                    break
            slot.job = job

    def _resolve_waits(self) -> None:
        for slot in self.slots:
            job = slot.job
            if job is None or job.wait is None:
                continue
            src, src_job, n = job.wait
            if src.job is src_job and len(src.tokens) < n and not src_job.cancel.is_set():
                continue  # still reading
            have = common_prefix(src.tokens, job.prompt, n)
            if have > len(slot.tokens):
                self.memory.remove(slot.seq_id, 0)
                self.memory.share(src.seq_id, slot.seq_id, have)
                slot.tokens = src.tokens[:have]
                job.reused = have
            job.wait = None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.samplers.close()
