"""The one-at-a-time edge runner (``[edge] parallel = 1``): one ``Llama.generate`` on the generation thread.

``LocalModel`` queues requests and runs one ``generate_blocking`` at a time on its compute thread.
It drives ``Llama.generate`` itself instead of ``create_chat_completion``, which re-detokenises the
whole completion on every token (quadratic) and builds a dict per token; ``generate`` also keeps the
longest common token prefix with the previous request in the KV cache, so a kiosk's shared system
prompt is prefilled once. Text crosses to the event loop through ``OneJob.put``; the cancel flag is
checked after every token, so a kiosk that went away frees the model within one token's time.
"""

from __future__ import annotations

import asyncio
import codecs
import threading
import time
from collections.abc import Callable
from typing import Any

from models import llama_runtime

from .constrained import request_constraints
from .decoding import StopScanner
from .model_loader import LoadedModel, chat_messages, check_context, prompt_tokens
from .types import ChatRequest, Finish, TextDelta, Usage


class OneJob:
    """One generation's state shared between the event loop and the worker thread."""

    __slots__ = ("cancel", "loop", "queue")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.cancel = threading.Event()

    def put(self, item: Any) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


def generate_blocking(model: LoadedModel, req: ChatRequest, job: OneJob, queue_ms: float, started: float,
                      default_max_tokens: int, beat: Callable[[], None]) -> tuple[float, float]:
    """Prefill, sample, detokenise, stop-scan; push the text and the ``Finish`` to ``job``.

    Runs on the generation thread; ``beat`` is called on every token (the watchdog's evidence of
    life). Raises ``APIError`` for a request the model cannot take. Returns when the first token
    came and when the answer ended (``time.perf_counter``), for the runner's wait estimates.
    """
    llama = model.llama
    # Per-request constraints (edge/constrained.py): the offered tools go into the chat template,
    # the request's GBNF grammar into this request's own sampler chain.
    tools, grammar = request_constraints(llama, req)
    tokens = prompt_tokens(model, chat_messages(req), tools)
    max_tokens = req.max_tokens or default_max_tokens
    check_context(tokens, model.n_ctx)
    max_tokens = min(max_tokens, model.n_ctx - len(tokens))
    if req.seed is not None:
        llama.set_seed(req.seed)
    reused = llama_runtime.kv_prefix(llama, tokens)
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
        beat()
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
    job.put(Finish(finish, Usage(len(tokens), n_out), timings, model.name))
    return first_at, done
