"""Every low-level or private detail of llama-cpp-python that the batched edge runner relies on.

The batched runner (``edge/batch_runner.py``) decodes several sequences in one ``llama_decode`` call,
which ``llama_cpp.Llama`` cannot do: it owns one sequence. So the runner keeps ``Llama`` for what it
does well (loading, metadata, tokenising, detokenising) and drives the context itself through the
C API that llama-cpp-python binds. Everything it assumes about that API, or about ``Llama``'s
private attributes, is here and nowhere else, and ``tests/gateway/test_llama_lowlevel.py`` checks
each assumption, so an upgrade that breaks one fails that test by name instead of corrupting answers.

What is assumed (pinned version: llama-cpp-python 0.3.36, its vendored llama.cpp):

A1. ``Llama.__init__`` reads its context parameters from
    ``llama_cpp.llama_cpp.llama_context_default_params()`` looked up at call time, then sets only the
    fields it has arguments for. ``n_seq_max`` and ``kv_unified`` are not among them, so
    :func:`context_params` swaps that function for one constructor call (under a lock) to set them.
A2. ``llama_context_params`` has the fields ``n_seq_max`` and ``kv_unified``. Without a unified cache
    each sequence has its own stream of ``n_ctx / n_seq_max`` cells, so a sequence's cells stay in
    position order and its logits do not depend on the other sequences. With a unified KV cache all
    sequences live in one stream and ``llama_memory_seq_cp`` within it only tags the source's cells
    with the destination sequence (no copy, no extra memory): a shared prompt's cells are stored once.
A3. ``Llama`` private attributes: ``_ctx.ctx`` (the ``llama_context *``), ``_model.vocab``,
    ``_model.token_get_text``, ``_batch`` (an ``_internals.LlamaBatch`` whose ``.batch`` is the
    ``llama_batch`` struct and which is closed with the ``Llama``), ``_stack`` (the ``ExitStack``
    closed with the ``Llama``), ``n_batch``.
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

For the one-at-a-time runner (``[edge] parallel = 1``), which drives ``Llama.generate``:

A8. ``Llama.generate`` builds its sampler chain by calling ``self._init_sampler(**settings)`` and the
    seed it uses is ``self._seed``; an instance attribute ``_init_sampler`` hides the method.
A9. ``Llama._input_ids[:Llama.n_tokens]`` are the tokens in its KV cache (the prefix ``generate`` reuses).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

_PARAMS_LOCK = threading.Lock()


def lib() -> Any:
    """The ctypes bindings (imported lazily: the gateway starts without loading llama.cpp)."""
    from llama_cpp import llama_cpp

    return llama_cpp


@contextlib.contextmanager
def context_params(n_seq_max: int, kv_unified: bool = True) -> Iterator[None]:
    """For one ``Llama(...)`` call: a context for ``n_seq_max`` sequences over a unified KV cache (A1, A2)."""
    cpp = lib()
    with _PARAMS_LOCK:
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


def context(llama: Any) -> Any:
    """The ``llama_context *`` of a ``Llama`` (A3)."""
    return llama._ctx.ctx


def vocab(llama: Any) -> Any:
    return llama._model.vocab


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


class SamplerChain:
    """One sequence's llama.cpp sampler chain: optional grammar, then the usual filters (A6).

    The order is llama-cpp-python's own for the same settings (``Llama._init_sampler``), so a request
    samples the same way it did through ``Llama.generate``. A grammar, when given, comes first: it
    masks every token the grammar forbids before the filters pick among the rest.
    """

    __slots__ = ("key", "ptr")

    def __init__(self, llama: Any, *, temperature: float, top_p: float, top_k: int, min_p: float,
                 seed: int | None, grammar: str | None = None, key: tuple[Any, ...] = ()) -> None:
        cpp = lib()
        self.key = key
        self.ptr = cpp.llama_sampler_chain_init(cpp.llama_sampler_chain_default_params())
        try:
            if grammar is not None:
                g = cpp.llama_sampler_init_grammar(vocab(llama), grammar.encode("utf-8"), b"root")
                if not g:
                    raise ValueError("the grammar could not be parsed")
                cpp.llama_sampler_chain_add(self.ptr, g)
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
        """Sample from the logits of the batch's ``index``-th token and accept it (A6)."""
        return int(lib().llama_sampler_sample(self.ptr, ctx, index))

    def reset(self) -> None:
        lib().llama_sampler_reset(self.ptr)

    def free(self) -> None:
        if self.ptr:
            lib().llama_sampler_free(self.ptr)
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


__all__ = [
    "Batch",
    "Memory",
    "SamplerChain",
    "context",
    "context_params",
    "is_eog",
    "kv_prefix",
    "kv_unified",
    "n_ctx",
    "n_seq_max",
    "replace_batch",
    "reuse_samplers",
    "supports_gpu_offload",
    "token_text",
    "vocab",
]
