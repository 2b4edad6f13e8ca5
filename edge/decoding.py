"""Turning a sequence's logits into text: pooled sampler chains and the stop-sequence scanner.

Both edge runners use them: the batched one (``edge/batch_runner.py``) takes a chain per slot from a
``SamplerPool`` (a new chain per request made the process grow: glibc keeps freed pieces), and both
cut their text with a ``StopScanner``, which holds back what could be the start of a stop sequence.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

from models import llama_runtime as ll


@dataclass(frozen=True)
class Sampling:
    """What a sequence's sampler chain is built from; equal settings share pooled chains."""

    temperature: float
    top_p: float
    seed: int | None
    grammar: str | None = None

    @property
    def top_k(self) -> int:
        return 40 if self.temperature > 0 else 1


class SamplerPool:
    """Reset-and-reuse llama.cpp sampler chains, at most ``keep`` idle ones, least recently used out."""

    def __init__(self, llama: Any, keep: int = 16) -> None:
        self._llama = llama
        self._keep = keep
        self._idle: collections.OrderedDict[Sampling, list[ll.SamplerChain]] = collections.OrderedDict()
        self.built = 0

    def take(self, sampling: Sampling) -> ll.SamplerChain:
        chains = self._idle.get(sampling)
        if chains:
            chain = chains.pop()
            if not chains:
                del self._idle[sampling]
            return chain  # ``give`` reset it
        self.built += 1
        return ll.SamplerChain(self._llama, temperature=sampling.temperature, top_p=sampling.top_p,
                               top_k=sampling.top_k, min_p=0.05, seed=sampling.seed, grammar=sampling.grammar,
                               key=(sampling,))

    def give(self, chain: ll.SamplerChain) -> None:
        chain.reset()  # an idle chain keeps no candidate array (``SamplerChain.reset``)
        sampling = chain.key[0]
        self._idle.setdefault(sampling, []).append(chain)
        self._idle.move_to_end(sampling)
        while sum(len(c) for c in self._idle.values()) > self._keep:
            _key, oldest = next(iter(self._idle.items()))
            oldest.pop(0).free()
            if not oldest:
                self._idle.popitem(last=False)

    def close(self) -> None:
        for chains in self._idle.values():
            for chain in chains:
                chain.free()
        self._idle.clear()


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
