"""Each assumption models/llama_runtime.py lists (A1-A11) about llama-cpp-python, checked on the real model.

These fail by name when an upgrade of llama-cpp-python changes what the batched runner relies on.
"""

from __future__ import annotations

import ctypes
import inspect
import re

import llama_cpp
import pytest
from llama_cpp import llama_cpp as cpp

from edge.model_loader import find_embedded_model
from harness import worker_threads
from models import llama_runtime as ll
from models.llama_runtime import open_llama

pytestmark = pytest.mark.skipif(find_embedded_model() is None, reason="embedded model not installed")

PROMPT = "The information desk is next to the main entrance of the mall"


@pytest.fixture(scope="module")
def llama() -> llama_cpp.Llama:
    model = open_llama(find_embedded_model(), sequences=3, n_ctx=3 * 256, n_threads=worker_threads() or 2,
                       n_batch=128, verbose=False)
    yield model
    model.close()


def tokens(llama: llama_cpp.Llama) -> list[int]:
    return llama.tokenize(PROMPT.encode(), add_bos=False, special=False)


def logits_after(llama: llama_cpp.Llama, batch: ll.Batch, token: int, pos: int, seq: int) -> list[float]:
    batch.clear()
    index = batch.add(token, pos, seq, True)
    assert batch.decode() == 0
    row = cpp.llama_get_logits_ith(ll.context(llama), index)
    return [row[i] for i in range(64)]


def test_a1_a2_context_params_reach_the_context(llama: llama_cpp.Llama) -> None:
    assert "llama_context_default_params()" in inspect.getsource(llama_cpp.Llama.__init__)
    assert ll.n_seq_max(llama) == 3
    assert ll.kv_unified(llama) is True
    assert ll.n_ctx(llama) >= 3 * 256
    # The library's own function is back after the constructor call.
    assert cpp.llama_context_default_params().n_seq_max == 1


def test_a3_private_attributes_of_llama(llama: llama_cpp.Llama) -> None:
    assert ll.context(llama) is not None and ll.vocab(llama) is not None
    assert isinstance(ll.token_text(llama, llama.token_eos()), str)
    assert hasattr(llama, "_stack") and hasattr(llama, "_batch") and llama.n_batch == 128


def test_a4_a5_a7_batch_decode_and_sequence_memory(llama: llama_cpp.Llama) -> None:
    fields = {name for name, _ in cpp.llama_batch._fields_}
    assert {"n_tokens", "token", "pos", "n_seq_id", "seq_id", "logits"} <= fields
    batch = ll.Batch(llama, 128)
    memory = ll.Memory(llama)
    memory.clear()
    prompt = tokens(llama)
    n = len(prompt)
    batch.clear()
    batch.add_many(prompt[:-1], 0, 0, logits_last=False)
    assert batch.decode() == 0
    assert memory.pos_max(0) == n - 2 and memory.pos_max(1) == -1
    # A2/A7: sequence 1 sees sequence 0's cells after a share, and the next token's logits are the same.
    memory.share(0, 1, n - 1)
    assert memory.pos_max(1) == n - 2
    on_0 = logits_after(llama, batch, prompt[-1], n - 1, 0)
    on_1 = logits_after(llama, batch, prompt[-1], n - 1, 1)
    assert on_0 == on_1
    # Without the prefix, sequence 2 computes something else.
    assert logits_after(llama, batch, prompt[-1], 0, 2) != on_0
    memory.remove(1, 3)
    assert memory.pos_max(1) == 2 and memory.pos_max(0) == n - 1  # sequence 0 keeps the shared cells
    # A5: an invalid batch (a sequence id past n_seq_max) is refused with a negative code, not a crash.
    batch.clear()
    batch.add(prompt[0], 0, 7, True)
    assert batch.decode() < 0
    memory.clear()


def test_a6_sampler_chains(llama: llama_cpp.Llama) -> None:
    batch = ll.Batch(llama, 128)
    memory = ll.Memory(llama)
    memory.clear()
    prompt = tokens(llama)
    batch.clear()
    batch.add_many(prompt, 0, 0, logits_last=True)
    assert batch.decode() == 0
    index = batch.n - 1
    greedy = ll.SamplerChain(llama, temperature=0.0, top_p=1.0, top_k=1, min_p=0.05, seed=None)
    seeded = ll.SamplerChain(llama, temperature=1.5, top_p=1.0, top_k=40, min_p=0.0, seed=99)
    try:
        first = greedy.sample(ll.context(llama), index)
        assert 0 <= first < llama.n_vocab()
        assert greedy.sample(ll.context(llama), index) == first
        draws = [seeded.sample(ll.context(llama), index) for _ in range(6)]
        seeded.reset()
        assert [seeded.sample(ll.context(llama), index) for _ in range(6)] == draws  # reset reseeds
        with pytest.raises(ValueError):
            ll.SamplerChain(llama, temperature=0.0, top_p=1.0, top_k=1, min_p=0.05, seed=None,
                            grammar="root ::= (")
        grammar = ll.SamplerChain(llama, temperature=0.0, top_p=1.0, top_k=1, min_p=0.05, seed=None,
                                  grammar='root ::= "yes" | "no"')
        token = grammar.sample(ll.context(llama), index)
        assert llama.detokenize([token]).decode() in ("y", "ye", "yes", "n", "no")
        grammar.free()
    finally:
        greedy.free()
        seeded.free()
        memory.clear()
GATE_GRAMMAR = r'root ::= "{\"gate\": \"" [A-Z] [0-9] [0-9]? "\"}"'
GATE_JSON = re.compile(r'\{"gate": "[A-Z][0-9][0-9]?"\}')


def _generate(llama: llama_cpp.Llama, sample, steps: int = 16) -> list[int]:
    """Greedy steps of one sequence from the test prompt, each token from ``sample(ctx, index)``."""
    batch, memory = ll.Batch(llama, 128), ll.Memory(llama)
    memory.clear()
    prompt = tokens(llama)
    batch.clear()
    batch.add_many(prompt, 0, 0, logits_last=True)
    assert batch.decode() == 0
    index, pos, out = batch.n - 1, len(prompt), []
    for _ in range(steps):
        token = sample(ll.context(llama), index)
        out.append(token)
        if cpp.llama_vocab_is_eog(ll.vocab(llama), token):
            break
        batch.clear()
        batch.add(token, pos, 0, True)
        assert batch.decode() == 0
        index, pos = 0, pos + 1
    memory.clear()
    return out


def _text(llama: llama_cpp.Llama, out: list[int]) -> str:
    return llama.detokenize([t for t in out if not cpp.llama_vocab_is_eog(ll.vocab(llama), t)]).decode()


def test_a12_a_lazily_checked_grammar_samples_what_grammar_first_samples(llama: llama_cpp.Llama) -> None:
    """A12: the token data layout, and the grammar checked after the draw: at temperature 0 the same
    tokens as a chain that masks the whole vocabulary first (llama-cpp-python's order); sampling at a
    high temperature, every answer still matches the grammar (the rejected draws were redrawn)."""
    assert ctypes.sizeof(cpp.llama_token_data) == 12
    assert [name for name, _ in cpp.llama_token_data._fields_] == ["id", "logit", "p"]
    assert [name for name, _ in cpp.llama_token_data_array._fields_] == ["data", "size", "selected", "sorted"]

    first = cpp.llama_sampler_chain_init(cpp.llama_sampler_chain_default_params())
    cpp.llama_sampler_chain_add(first, cpp.llama_sampler_init_grammar(ll.vocab(llama), GATE_GRAMMAR.encode(), b"root"))
    cpp.llama_sampler_chain_add(first, cpp.llama_sampler_init_greedy())
    lazy = ll.SamplerChain(llama, temperature=0.0, top_p=1.0, top_k=1, min_p=0.05, seed=None, grammar=GATE_GRAMMAR)
    try:
        expected = _generate(llama, lambda ctx, i: int(cpp.llama_sampler_sample(first, ctx, i)))
        got = _generate(llama, lazy.sample)
        assert got == expected
        assert GATE_JSON.fullmatch(_text(llama, got)), _text(llama, got)
        assert lazy._all is not None  # the model's own first choice was rejected at least once
    finally:
        cpp.llama_sampler_free(first)
        lazy.free()

    hot = ll.SamplerChain(llama, temperature=1.5, top_p=1.0, top_k=0, min_p=0.0, seed=7, grammar=GATE_GRAMMAR)
    try:
        for _ in range(3):
            hot.reset()
            out = _generate(llama, hot.sample)
            assert GATE_JSON.fullmatch(_text(llama, out)), _text(llama, out)
    finally:
        hot.free()




def test_a8_a9_what_the_one_at_a_time_runner_uses() -> None:
    source = inspect.getsource(llama_cpp.Llama.generate)
    assert "self._init_sampler(" in source
    assert "_seed" in inspect.getsource(llama_cpp.Llama._init_sampler)
    model = open_llama(find_embedded_model(), n_ctx=256, n_threads=worker_threads() or 2, verbose=False)
    try:
        prompt = model.tokenize(PROMPT.encode(), add_bos=False, special=False)
        model.eval(prompt)
        assert ll.kv_prefix(model, [*prompt, 1, 2]) == len(prompt)
        built = []
        original = model._init_sampler

        def counting(**kwargs):  # type: ignore[no-untyped-def]
            built.append(kwargs)
            return original(**kwargs)

        model._init_sampler = counting
        ll.reuse_samplers(model)
        for _ in range(2):
            for _token in model.generate(prompt, temp=0.0, top_k=1):
                break
        assert len(built) == 1
    finally:
        model.close()


def test_a10_model_params_reach_the_model(llama: llama_cpp.Llama) -> None:
    assert "llama_model_default_params()" in inspect.getsource(llama_cpp.Llama.__init__)
    assert "use_extra_bufts" in {name for name, _ in cpp.llama_model_params._fields_}
    assert llama.model_params.use_extra_bufts is ll.use_extra_buffer_types("auto")
    # The library's own function is back after the constructor call.
    assert cpp.llama_model_default_params.__name__ == "llama_model_default_params" and ll.lib() is cpp


def test_a11_ggml_type_values() -> None:
    for name, value in ll.GGML_TYPES.items():
        assert getattr(cpp, f"GGML_TYPE_{name.upper()}") == value == ll.ggml_type(name)
