"""Every use of llama-cpp-python beyond its documented ``Llama`` API, and what each one assumes.

llama-cpp-python's ``Llama`` owns one sequence and exposes few of llama.cpp's settings, so the edge
runner reaches past it: to open a model with CPU kernels that work on this machine, to decode several
sequences in one ``llama_decode`` call (``edge/batch_runner.py``), and to reuse sampler chains and a
smaller token batch in the one-at-a-time runner (``edge/local_model.py``). Everything it assumes
about llama-cpp-python's private attributes, its process-wide default-parameter functions and the C
API it binds is here and nowhere else (``edge`` imports this module; nothing here imports ``edge``),
and ``tests/gateway/test_llama_assumptions.py`` checks each assumption on the real model, so an
upgrade that breaks one fails that test by name instead of crashing a kiosk or corrupting answers.
``pyproject.toml`` bounds llama-cpp-python to the release line this was checked against.

Opening a model (:func:`open_llama`). llama.cpp built with ``-march=native`` (llama-cpp-python's
default build) on an Intel CPU with AMX (Sapphire Rapids and later) routes quantised matrix products
through its AMX "extra buffer type", and that kernel segfaults on the first token in some VMs (seen
here on a 2-vCPU Sapphire Rapids VM with the embedded SmolLM2 Q4_1: ``ggml_backend_amx_mul_mat``;
upstream ggml-org/llama.cpp#20824, closed stale without a fix; dspy's CI and Ollama dropped their AMX
builds for the same crash and because AMX measured slower on Sapphire Rapids). A crash there would
take the gateway down on the first request and make every model update fail its smoke test.
llama.cpp's switch for it is the model parameter ``use_extra_bufts`` (``llama-server --no-repack``);
``Llama()`` has no argument for it, so :func:`open_llama` sets it on the default parameters that
``Llama.__init__`` asks for, under a lock, for the one constructor call (A10). Extra buffer types are
llama.cpp's CPU weight repacking (AMX on x86, CPU_REPACK for Q4_0/IQ4_NL on x86 and Arm, KleidiAI
on Arm); ``auto`` turns them off only where the CPU reports AMX, so an Arm board or an AMD/older
Intel CPU keeps its repacked kernels. GPU-offloaded layers are not affected.

What is assumed (pinned version: llama-cpp-python 0.3.36, its vendored llama.cpp):

A1. ``Llama.__init__`` reads its context parameters from
    ``llama_cpp.llama_cpp.llama_context_default_params()`` looked up at call time, then sets only the
    fields it has arguments for. ``n_seq_max`` and ``kv_unified`` are not among them, so
    :func:`open_llama` swaps that function for one constructor call (under a lock) to set them.
A2. ``llama_context_params`` has the fields ``n_seq_max`` and ``kv_unified``. Without a unified cache
    each sequence has its own stream of ``n_ctx / n_seq_max`` cells, so a sequence's cells stay in
    position order and its logits do not depend on the other sequences. With a unified KV cache all
    sequences live in one stream and ``llama_memory_seq_cp`` within it only tags the source's cells
    with the destination sequence (no copy, no extra memory): a shared prompt's cells are stored once.
A3. ``Llama`` private attributes: ``_ctx.ctx`` (the ``llama_context *``), ``_model.vocab`` (the
    ``llama_vocab *``, for tokenising and grammar samplers), ``_model.token_get_text``, ``_batch`` (an
    ``_internals.LlamaBatch`` whose ``.batch`` is the ``llama_batch`` struct and which is closed with
    the ``Llama``), ``_stack`` (the ``ExitStack`` closed with the ``Llama``), ``n_batch``.
A4. ``llama_batch`` has the fields ``n_tokens``, ``token``, ``pos``, ``n_seq_id``, ``seq_id`` (one
    array of ids per token) and ``logits`` (an int8 flag per token: compute this token's logits);
    ``llama_batch_init(n, 0, 1)`` allocates room for ``n`` tokens of one sequence id each.
A5. ``llama_decode`` returns 0 on success, 1 when the KV cache has no room (memory unchanged),
    2 when aborted and < 0 on errors (processed micro-batches may stay in memory).
A6. ``llama_sampler_sample(chain, ctx, i)`` samples from the logits of the batch's ``i``-th token
    (one flagged for logits) and accepts the token into the chain; ``llama_sampler_reset`` puts a
    chain back to its state when built (the ``dist`` sampler reseeded with its seed, a grammar
    sampler back at its start rule); ``llama_sampler_init_grammar`` returns NULL for a grammar it
    cannot parse.
A7. ``llama_memory_seq_rm(mem, seq, p0, -1)`` drops a sequence's cells from position ``p0`` on (true
    for a transformer's KV cache); ``llama_memory_seq_cp(mem, src, dst, 0, n)`` makes ``dst`` see
    ``src``'s cells at positions ``[0, n)``.
A12. ``llama_token_data`` is ``{int32 id; float logit; float p}`` (12 bytes) and
    ``llama_token_data_array`` is ``{data, size, selected, sorted}``; ``llama_sampler_apply`` of a
    grammar sampler sets the logit of every candidate the grammar rejects to -inf (an end-of-generation
    token too, while the grammar is incomplete) and ``llama_sampler_accept`` advances it; the chain's
    filters (top-k, typical, top-p, min-p, temperature, dist, greedy) sort or cut the array in place,
    set ``selected`` and keep nothing from ``accept``; ``llama_get_logits_ith(ctx, i)`` points to
    ``n_vocab`` floats.

For the one-at-a-time runner (``[edge] parallel = 1``), which drives ``Llama.generate``:

A8. ``Llama.generate`` builds its sampler chain by calling ``self._init_sampler(**settings)`` and the
    seed it uses is ``self._seed``; an instance attribute ``_init_sampler`` hides the method.
A9. ``Llama._input_ids[:Llama.n_tokens]`` are the tokens in its KV cache (the prefix ``generate`` reuses).

For opening any model:

A10. ``Llama.__init__`` reads its model parameters from ``llama_cpp.llama_cpp.llama_model_default_params()``
    looked up at call time, and ``llama_model_params`` has the field ``use_extra_bufts``.
A11. ``ggml_type`` values of the KV cache types (``Llama(type_k=..., type_v=...)`` takes the raw
    enum): ``f16`` = 1, ``q4_0`` = 2, ``q8_0`` = 8 (``llama_cpp.GGML_TYPE_*``).
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

ExtraBufferTypes = Literal["auto", "on", "off"]

_PARAMS_LOCK = threading.Lock()  # both default-parameter swaps: one constructor call at a time
_CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU feature flags of the first processor in ``/proc/cpuinfo`` (empty where unreadable)."""
    if cpuinfo is None:
        try:
            cpuinfo = _CPUINFO.read_text(errors="replace")
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def cpu_has_amx(cpuinfo: str | None = None) -> bool:
    return bool({"amx_int8", "amx_tile", "amx_bf16"} & cpu_flags(cpuinfo))


def use_extra_buffer_types(setting: ExtraBufferTypes = "auto", cpuinfo: str | None = None) -> bool:
    """Whether llama.cpp may repack weights into its CPU extra buffer types (see the module doc)."""
    if setting == "on":
        return True
    if setting == "off":
        return False
    return not cpu_has_amx(cpuinfo)


@contextlib.contextmanager
def _model_params(extra_buffer_types: bool) -> Iterator[None]:
    """For one ``Llama(...)`` call: llama.cpp's extra buffer types on or off (A10). The caller holds the lock."""
    cpp = lib()
    original = cpp.llama_model_default_params

    def defaults() -> Any:
        params = original()
        params.use_extra_bufts = extra_buffer_types
        return params

    cpp.llama_model_default_params = defaults
    try:
        yield
    finally:
        cpp.llama_model_default_params = original


def open_llama(model_path: str | Path, *, extra_buffer_types: ExtraBufferTypes = "auto", sequences: int = 1,
               unified_kv: bool = True, **kwargs: Any) -> Any:
    """``llama_cpp.Llama(model_path, **kwargs)`` with llama.cpp's extra buffer types decided for this
    CPU; with ``sequences`` > 1, a context for that many sequences (A1, A2), over one unified KV
    cache when ``unified_kv``."""
    from llama_cpp import Llama

    with _PARAMS_LOCK, _model_params(use_extra_buffer_types(extra_buffer_types)):
        context = _context_params(sequences, unified_kv) if sequences > 1 else contextlib.nullcontext()
        with context:
            return Llama(model_path=str(model_path), **kwargs)


# ----- the C API and Llama's private attributes (A1-A9) -------------------------------------------
def lib() -> Any:
    """The ctypes bindings (imported lazily: the gateway starts without loading llama.cpp)."""
    from llama_cpp import llama_cpp

    return llama_cpp


@contextlib.contextmanager
def _context_params(n_seq_max: int, kv_unified: bool) -> Iterator[None]:
    """For one ``Llama(...)`` call: a context for ``n_seq_max`` sequences (A1, A2). The caller holds the lock."""
    cpp = lib()
    original = cpp.llama_context_default_params

    def defaults() -> Any:
        params = original()
        params.n_seq_max = n_seq_max
        params.kv_unified = kv_unified
        return params

    cpp.llama_context_default_params = defaults
    try:
        yield
    finally:
        cpp.llama_context_default_params = original


# ggml_type values of the KV cache types (A11)
GGML_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2}


def ggml_type(name: str) -> int:
    """The ``ggml_type`` enum value ``Llama(type_k=..., type_v=...)`` takes for a KV cache type name."""
    return GGML_TYPES[name]


def context(llama: Any) -> Any:
    """The ``llama_context *`` of a ``Llama`` (A3)."""
    return llama._ctx.ctx


def vocab(llama: Any) -> Any:
    """The ``llama_vocab *`` of a ``Llama`` (A3)."""
    return llama._model.vocab


def vocab_if_any(llama: Any) -> Any | None:
    """The ``llama_vocab *``, or None for a stand-in without one (callers then use ``Llama.tokenize``)."""
    return getattr(getattr(llama, "_model", None), "vocab", None)


def token_text(llama: Any, token: int) -> str:
    return llama._model.token_get_text(token)


def n_seq_max(llama: Any) -> int:
    return int(lib().llama_n_seq_max(context(llama)))


def replace_batch(llama: Any, n_tokens: int) -> Any:
    """Give ``Llama`` a token batch of ``n_tokens`` slots with one sequence id each and return the
    ``llama_batch`` struct (A3, A4).

    ``Llama`` builds its batch with ``n_seq_max = n_ctx``: every one of its ``n_batch`` slots gets room
    for that many sequence ids (4 MB at ``n_ctx`` 2048, about 2 MB of it resident), while a token here
    always belongs to exactly one sequence (a shared prompt is shared through the KV cache, A2). The
    old batch is freed now (its later close is a no-op); the new one is closed with the model.
    """
    from llama_cpp._internals import LlamaBatch

    old = llama._batch
    llama._batch = llama._stack.enter_context(
        contextlib.closing(LlamaBatch(n_tokens=n_tokens, embd=0, n_seq_max=1, verbose=False))
    )
    old.close()
    return llama._batch.batch


class Batch:
    """Writes tokens into a ``llama_batch`` and decodes it (A4, A5)."""

    def __init__(self, llama: Any, capacity: int) -> None:
        self._raw = replace_batch(llama, capacity)
        self._ctx = context(llama)
        self.capacity = capacity
        self.n = 0

    def clear(self) -> None:
        self.n = 0

    def add(self, token: int, pos: int, seq_id: int, logits: bool) -> int:
        """Append one token; its index in the batch (what :func:`sample` takes for its logits)."""
        i = self.n
        raw = self._raw
        raw.token[i] = token
        raw.pos[i] = pos
        raw.n_seq_id[i] = 1
        raw.seq_id[i][0] = seq_id
        raw.logits[i] = 1 if logits else 0
        self.n = i + 1
        return i

    def add_many(self, tokens: Sequence[int], pos: int, seq_id: int, logits_last: bool) -> None:
        raw = self._raw
        i = self.n
        for offset, token in enumerate(tokens):
            raw.token[i] = token
            raw.pos[i] = pos + offset
            raw.n_seq_id[i] = 1
            raw.seq_id[i][0] = seq_id
            raw.logits[i] = 0
            i += 1
        if logits_last and tokens:
            raw.logits[i - 1] = 1
        self.n = i

    def decode(self) -> int:
        """``llama_decode`` of what was added: 0 ok, 1 no room in the KV cache, else an error (A5)."""
        self._raw.n_tokens = self.n
        return int(lib().llama_decode(self._ctx, self._raw))


class Memory:
    """The context's KV cache, per sequence (A2, A7)."""

    __slots__ = ("_mem",)

    def __init__(self, llama: Any) -> None:
        self._mem = lib().llama_get_memory(context(llama))

    def remove(self, seq_id: int, p0: int = 0) -> None:
        """Drop ``seq_id``'s cells from position ``p0`` on (all of them for 0)."""
        lib().llama_memory_seq_rm(self._mem, seq_id, p0, -1)

    def share(self, src: int, dst: int, n: int) -> None:
        """``dst`` sees ``src``'s first ``n`` positions: the same cells, not a copy (unified cache)."""
        lib().llama_memory_seq_cp(self._mem, src, dst, 0, n)

    def clear(self) -> None:
        lib().llama_memory_clear(self._mem, False)

    def pos_max(self, seq_id: int) -> int:
        return int(lib().llama_memory_seq_pos_max(self._mem, seq_id))


# llama.cpp's ``llama_token_data`` (A12): a token id, its logit and its probability.
_TOKEN_DATA = [("id", "<i4"), ("logit", "<f4"), ("p", "<f4")]
_REJECTED = float("-inf")  # the logit a grammar gives a token it rejects


class SamplerChain:
    """One sequence's llama.cpp sampler chain, with an optional grammar checked lazily (A6, A12).

    The filters are llama-cpp-python's own for the same settings, in its order
    (``Llama._init_sampler``), so a request samples the way it did through ``Llama.generate``.

    A grammar (a JSON schema's or a tool call's) is kept out of the chain and used the way llama.cpp's
    own ``common_sampler_sample`` (llama-server's) uses it. Masking the whole vocabulary at every step
    costs 7-10 ms a token for the embedded model's 49k tokens on a 2-core VM, a third or more of a
    decode step (``bench/grammar_check.py``). Instead the chain draws as if there were no grammar, and
    the grammar checks that one token (tens of microseconds). Only a
    token it rejects sends the step back through the grammar over every candidate, then through the
    chain again. At temperature 0 the token is the same either way: the most likely token, when the
    grammar allows it, is also the most likely allowed one. When sampling, the draws differ from
    grammar-first (the filters first see the unmasked distribution), as they do in llama-server.
    """

    __slots__ = ("_all", "_all_array", "_all_view", "_n_vocab", "_one", "_one_array", "grammar", "key", "ptr")

    def __init__(self, llama: Any, *, temperature: float, top_p: float, top_k: int, min_p: float,
                 seed: int | None, grammar: str | None = None, key: tuple[Any, ...] = ()) -> None:
        cpp = lib()
        self.key = key
        self.grammar = None
        self._all = self._all_array = self._all_view = None
        self.ptr = cpp.llama_sampler_chain_init(cpp.llama_sampler_chain_default_params())
        try:
            if grammar is not None:
                self.grammar = cpp.llama_sampler_init_grammar(vocab(llama), grammar.encode("utf-8"), b"root")
                if not self.grammar:
                    self.grammar = None
                    raise ValueError("the grammar could not be parsed")
                self._n_vocab = int(cpp.llama_vocab_n_tokens(vocab(llama)))
                self._one = (cpp.llama_token_data * 1)()
                self._one_array = cpp.llama_token_data_array(data=self._one, size=1, selected=-1, sorted=False)
            if temperature <= 0.0:
                cpp.llama_sampler_chain_add(self.ptr, cpp.llama_sampler_init_greedy())
            else:
                seed_value = cpp.LLAMA_DEFAULT_SEED if seed is None else seed & 0xFFFFFFFF
                cpp.llama_sampler_chain_add(self.ptr, cpp.llama_sampler_init_top_k(top_k))
                cpp.llama_sampler_chain_add(self.ptr, cpp.llama_sampler_init_typical(1.0, 1))
                cpp.llama_sampler_chain_add(self.ptr, cpp.llama_sampler_init_top_p(top_p, 1))
                cpp.llama_sampler_chain_add(self.ptr, cpp.llama_sampler_init_min_p(min_p, 1))
                cpp.llama_sampler_chain_add(self.ptr, cpp.llama_sampler_init_temp(temperature))
                cpp.llama_sampler_chain_add(self.ptr, cpp.llama_sampler_init_dist(seed_value))
        except BaseException:
            self.free()
            raise

    def sample(self, ctx: Any, index: int) -> int:
        """Sample from the logits of the batch's ``index``-th token and accept it (A6, A12)."""
        cpp = lib()
        token = int(cpp.llama_sampler_sample(self.ptr, ctx, index))
        if self.grammar is None:
            return token
        one = self._one[0]
        one.id, one.logit, one.p = token, 0.0, 0.0
        self._one_array.size, self._one_array.selected = 1, -1
        cpp.llama_sampler_apply(self.grammar, ctypes.byref(self._one_array))
        if one.logit == _REJECTED:  # rejected: this step again, with the grammar over every token
            token = self._resample(ctx, index)
        cpp.llama_sampler_accept(self.grammar, token)
        return token

    def _resample(self, ctx: Any, index: int) -> int:
        """The grammar over every candidate, then the chain (its filters keep no state between tokens,
        so the rejected draw's accept left nothing behind)."""
        import numpy as np

        cpp = lib()
        n = self._n_vocab
        if self._all is None:  # 12 bytes a token, while a request whose grammar rejects a draw runs
            self._all = (cpp.llama_token_data * n)()
            self._all_view = np.frombuffer(self._all, dtype=_TOKEN_DATA)
            self._all_array = cpp.llama_token_data_array(data=self._all, size=n, selected=-1, sorted=False)
        view = self._all_view
        view["id"] = np.arange(n, dtype=np.int32)  # the filters sort the array in place: ids again each time
        view["logit"] = np.ctypeslib.as_array(cpp.llama_get_logits_ith(ctx, index), shape=(n,))
        view["p"] = 0.0
        array = self._all_array
        array.data, array.size, array.selected, array.sorted = self._all, n, -1, False
        cpp.llama_sampler_apply(self.grammar, ctypes.byref(array))
        cpp.llama_sampler_apply(self.ptr, ctypes.byref(array))
        token = int(array.data[array.selected].id)
        cpp.llama_sampler_accept(self.ptr, token)
        return token

    def reset(self) -> None:
        """Back to the state when built; the candidate array goes (an idle pooled chain holds none)."""
        cpp = lib()
        cpp.llama_sampler_reset(self.ptr)
        if self.grammar is not None:
            cpp.llama_sampler_reset(self.grammar)
        self._all = self._all_array = self._all_view = None

    def free(self) -> None:
        cpp = lib()
        if self.grammar is not None:
            cpp.llama_sampler_free(self.grammar)
            self.grammar = None
        if self.ptr:
            cpp.llama_sampler_free(self.ptr)
            self.ptr = None


def reuse_samplers(llama: Any, keep: int = 8) -> None:
    """Make ``llama.generate`` reuse its llama.cpp sampler chain for the same settings and seed (A8).

    ``Llama.generate`` builds a new chain on every call; the old one is freed, yet the process
    still grew by about 20 MB over the first 40 requests (glibc keeps the freed pieces), while
    reusing one chain kept it flat (measured with the embedded model). A reused chain is reset
    first, which clears its penalty history and reseeds its random draw exactly as a new chain
    would be seeded (the same ``seed`` gives the same draws; the default seed is fresh each time).
    """
    build = llama._init_sampler  # the bound method, before the instance attribute hides it
    cpp = lib()
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
            cpp.llama_sampler_reset(chain.sampler)
        chains[key] = chain
        return chain

    llama._init_sampler = init_sampler


def kv_prefix(llama: Any, tokens: Sequence[int]) -> int:
    """How many leading ``tokens`` ``Llama`` already holds in its KV cache (A9)."""
    n = 0
    with contextlib.suppress(Exception):
        for a, b in zip(llama._input_ids[: llama.n_tokens], tokens, strict=False):
            if a != b:
                break
            n += 1
    return n


def is_eog(llama: Any, token: int) -> bool:
    return bool(lib().llama_vocab_is_eog(vocab(llama), token))


def supports_gpu_offload() -> bool:
    return bool(lib().llama_supports_gpu_offload())


def n_ctx(llama: Any) -> int:
    return int(lib().llama_n_ctx(context(llama)))


def kv_unified(llama: Any) -> bool:
    """Whether the context was made with a unified KV cache (read back from its parameters)."""
    return bool(getattr(llama.context_params, "kv_unified", False))
