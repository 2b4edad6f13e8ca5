"""What a grammar costs per generated token on the device: masking the whole vocabulary, against checking
the one token the sampler drew (what ``models.llama_runtime.SamplerChain`` does first), and one decode
step of the same model for scale.

The embedded model's vocabulary and a small JSON grammar (a gate number); each figure is the median of
``--repeat`` runs. Prints the figures and writes ``bench/results/grammar_check.json``.

    .venv/bin/python -m bench.grammar_check [--repeat 30]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
GRAMMAR = r'root ::= "{\"gate\": \"" [A-Z] [0-9] [0-9]? "\"}"'


def measure(model: Path, repeat: int) -> dict:
    import numpy as np
    from llama_cpp import llama_cpp as cpp

    from models import llama_runtime as ll

    llama = ll.open_llama(str(model), n_ctx=256, verbose=False)
    vocab = ll.vocab(llama)
    n = int(cpp.llama_vocab_n_tokens(vocab))
    grammar = cpp.llama_sampler_init_grammar(vocab, GRAMMAR.encode(), b"root")
    every = (cpp.llama_token_data * n)()
    view = np.frombuffer(every, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
    one = (cpp.llama_token_data * 1)()
    logits = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    full_ms, one_ms, step_ms = [], [], []
    try:
        for _ in range(repeat):
            view["id"], view["logit"], view["p"] = np.arange(n, dtype=np.int32), logits, 0.0
            array = cpp.llama_token_data_array(data=every, size=n, selected=-1, sorted=False)
            start = time.perf_counter()
            cpp.llama_sampler_apply(grammar, ctypes.byref(array))
            full_ms.append((time.perf_counter() - start) * 1e3)
            one[0].id, one[0].logit, one[0].p = 90, 0.0, 0.0
            single = cpp.llama_token_data_array(data=one, size=1, selected=-1, sorted=False)
            start = time.perf_counter()
            cpp.llama_sampler_apply(grammar, ctypes.byref(single))
            one_ms.append((time.perf_counter() - start) * 1e3)
        prompt = llama.tokenize(b"Where is gate B12?")
        llama.eval(prompt)
        for _ in range(max(3, repeat // 3)):
            start = time.perf_counter()
            llama.eval(prompt[-1:])
            step_ms.append((time.perf_counter() - start) * 1e3)
    finally:
        cpp.llama_sampler_free(grammar)
        llama.close()
    full, single, step = (statistics.median(v) for v in (full_ms, one_ms, step_ms))
    return {"n_vocab": n, "repeat": repeat, "mask_every_token_ms": full, "check_one_token_ms": single,
            "decode_step_ms": step, "mask_share_of_step": full / step, "machine": {"cpus": os.cpu_count()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--out", type=Path, default=RESULTS / "grammar_check.json")
    args = parser.parse_args(argv)
    from bench.local_run import embedded_model_or_say

    model = embedded_model_or_say()
    if model is None:
        return 2
    report = measure(model, args.repeat)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"grammar over the embedded model's {report['n_vocab']} tokens, median of {report['repeat']}:")
    print(f"  mask every token  {report['mask_every_token_ms']:8.3f} ms")
    print(f"  check one token   {report['check_one_token_ms']:8.4f} ms")
    print(f"  one decode step   {report['decode_step_ms']:8.3f} ms (mask = {report['mask_share_of_step']:.2f} of it)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
