"""Evidence for one question, and the grounded prompt built from it.

The passages go at the end of the kiosk's system prompt, never before it: the system prompt's
tokens stay the prompt's first tokens, so llama.cpp still reuses their KV cache across requests and
only the facts and the question are prefilled. The block is capped by the operator's token budget
(whole passages, best first) so a long fact never pushes the question out of a small context.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from edge.types import ChatRequest, Message

from .index import Passage

Strength = Literal["strong", "weak", "none"]
_CJK = re.compile("[\u3400-\u4dbf\u4e00-\u9fff]")

DEFAULT_REFUSAL = {
    "en": "I'm sorry, I don't have that information. Please ask a member of staff or the information desk.",
    "zh": "抱歉，我没有这方面的信息。请咨询工作人员或服务台。",
}
_HEADER = {
    "en": ("Venue facts (from the operator; use only these for questions about this place):",
           "If these facts do not answer the question, do not guess: reply exactly \"{refusal}\""),
    "zh": ("场所信息（由运营方提供；回答关于本场所的问题时只能依据以下内容）：",
           "如果以上信息不能回答问题，不要猜测，请回答：“{refusal}”"),
}
_NO_FACTS = {
    "en": "No venue facts match this question. Do not invent locations, opening hours or prices of this "
          "place; if the question is about this place, reply exactly \"{refusal}\"",
    "zh": "没有与此问题相关的场所信息。不要编造本场所的位置、营业时间或价格；如果问题与本场所有关，请回答：“{refusal}”",
}


def question_language(text: str) -> str:
    """``zh`` when the question has Chinese characters, else ``en`` (the packs' two languages)."""
    return "zh" if _CJK.search(text) else "en"


@dataclass(frozen=True)
class Evidence:
    """What retrieval found for a question and what it means for the route and the prompt."""

    venue: bool  # the question is about the venue
    strength: Strength
    found: tuple[Passage, ...]  # the top passages, whatever their coverage (shown by /v1/route)
    mode: Literal["strict", "lenient"]
    pack_version: str
    lang: str
    refusal: str  # the operator's "ask staff" wording, in the question's language
    retrieval_ms: float = 0.0
    grounding: tuple[Passage, ...] = field(default=())  # the passages that go into the prompt

    @property
    def top(self) -> Passage | None:
        return self.found[0] if self.found else None

    @property
    def refuse(self) -> bool:
        """Strict mode, a venue question, no evidence: the operator's wording, not a model's guess."""
        return self.mode == "strict" and self.venue and self.strength == "none"

    @property
    def rule(self) -> str:
        """The policy rule this evidence adds, e.g. ``knowledge:strong:restroom-l1:0.92``."""
        top = self.top
        if self.strength == "none" or top is None:
            return "knowledge:none"
        return f"knowledge:{self.strength}:{top.fact.id}:{top.coverage:.2f}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "venue_question": self.venue,
            "strength": self.strength,
            "mode": self.mode,
            "pack_version": self.pack_version,
            "retrieval_ms": round(self.retrieval_ms, 3),
            "refuse": self.refuse,
            "passages": [p.as_dict() for p in self.found],
            "grounding": [f"{p.fact.id}/{p.fact.lang}" for p in self.grounding],
        }


def grounding_block(evidence: Evidence, budget_tokens: int, count_tokens: Callable[[str], int]) -> str:
    """The text appended to the system prompt: numbered facts within the budget, then the rule."""
    lang = evidence.lang if evidence.lang in _HEADER else "en"
    if not evidence.grounding:
        return _NO_FACTS[lang].format(refusal=evidence.refusal)
    head, tail = _HEADER[lang]
    tail = tail.format(refusal=evidence.refusal)
    lines = [head]
    used = count_tokens(head) + count_tokens(tail)
    for number, passage in enumerate(evidence.grounding, start=1):
        line = f"[{number}] {passage.fact.text}"
        cost = count_tokens(line)
        if used + cost > budget_tokens and number > 1:
            break  # whole facts only: half a fact is how a wrong floor gets stated
        lines.append(line)
        used += cost
    lines.append(tail)
    return "\n".join(lines)


def grounded_request(req: ChatRequest, block: str) -> ChatRequest:
    """A copy of ``req`` whose system prompt ends with ``block`` (a system message is added if none).

    The kiosk's own system prompt keeps its place and text, so its KV prefix is reused.
    """
    messages = list(req.messages)
    last_system = max((i for i, m in enumerate(messages) if m.role in ("system", "developer")), default=None)
    if last_system is None:
        messages.insert(0, Message("system", block))
    else:
        prior = messages[last_system]
        messages[last_system] = Message(prior.role, f"{prior.content}\n\n{block}")
    return dataclasses.replace(req, messages=messages)


def estimate_tokens(text: str) -> int:
    """A tokenizer-free upper estimate (Latin ~3.5 characters a token, a CJK character ~1.5 tokens)."""
    cjk = len(_CJK.findall(text))
    return int((len(text) - cjk) / 3.5 + cjk * 1.5) + 1


__all__ = ["DEFAULT_REFUSAL", "Evidence", "estimate_tokens", "ground", "grounded_request", "grounding_block",
           "question_language"]


def ground(req: ChatRequest, evidence: Evidence | None, budget_tokens: int) -> ChatRequest:
    """The request a backend should see: grounded for a venue question, else ``req`` itself."""
    if evidence is None or not (evidence.venue or evidence.grounding):
        return req
    return grounded_request(req, grounding_block(evidence, budget_tokens, estimate_tokens))
