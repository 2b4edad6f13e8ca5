"""A prompt over the size budget by its byte bound is counted only when the count changes the route.

``Router.decide`` takes an exact counter next to the bound. A plain single-turn message that the
classifier calls complex goes to an available cloud whatever its size, so it is classified first and
never counted; every other request (simple, multi-turn, tools, override, no cloud) is counted first and
decided exactly as before. The counter and classifier here record their calls; the real tokenizer's part
is in tests/gateway/test_prompt_token_bound.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edge.config import RouterConfig, Settings
from edge.router import LiveState, RefusalKind, Router
from edge.schemas import parse_chat_request

SETTINGS = Settings()
UP = LiveState(edge_ready=True, edge_n_ctx=1000, cloud_enabled=True, cloud_available=True, cloud_ttft_p95_s=0.8)
DOWN = LiveState(edge_ready=True, edge_n_ctx=1000, cloud_enabled=True, cloud_available=False)
BOUND = 900  # over the 300-token budget (0.3 of 1,000)


@dataclass
class Result:
    label: str
    confidence: float
    latency_ms: float = 0.2


@dataclass
class Recording:
    """A classifier with a fixed answer that counts how often it is asked."""

    label: str
    confidence: float = 0.97
    calls: list[str] = field(default_factory=list)
    confidence_threshold: float = 0.8

    def classify(self, text: str) -> Result:
        self.calls.append(text)
        return Result(self.label, self.confidence)


@dataclass
class Counter:
    tokens: int
    calls: int = 0

    def __call__(self) -> int:
        self.calls += 1
        return self.tokens


def _req(*turns: str, headers: dict | None = None, **body):
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
    return parse_chat_request({"model": "edgecloud-auto", "messages": messages, **body}, SETTINGS, headers or {})


def _decide(r, label: str, exact: int, live: LiveState = UP):
    classifier, counter = Recording(label), Counter(exact)
    d = Router(RouterConfig(max_prompt_share=0.3), classifier).decide(
        r, live, BOUND, prompt_tokens_exact=False, count_tokens=counter)
    return d, classifier, counter


def test_a_complex_message_goes_to_the_cloud_uncounted():
    d, classifier, counter = _decide(_req("prove it " * 100), "complex", exact=400)
    assert counter.calls == 0 and len(classifier.calls) == 1
    assert (d.route, d.reason, d.label) == ("cloud", "classifier:complex:0.97", "complex")
    assert d.rules == ["classifier:complex:0.97"]
    assert d.edge_ok is False and d.refusal is None and d.classifier_ms == 0.2
    assert (d.prompt_tokens, d.prompt_tokens_exact) == (BOUND, False)  # the bound, said to be one


def test_a_simple_message_is_counted_and_classified_once():
    # Under the budget exactly: the size rule does not fire and the first label decides.
    d, classifier, counter = _decide(_req("where is gate 5 " * 40), "simple", exact=250)
    assert counter.calls == 1 and len(classifier.calls) == 1
    assert (d.route, d.reason) == ("edge", "classifier:simple:0.97")
    assert (d.prompt_tokens, d.prompt_tokens_exact) == (250, True)
    # Over it exactly: the size rule sends it away, as before, and may fall back to the edge.
    d, classifier, counter = _decide(_req("where is gate 5 " * 40), "simple", exact=450)
    assert counter.calls == 1 and (d.route, d.reason) == ("cloud", "prompt-size")
    assert d.rules == ["prompt-size"] and d.label is None and d.edge_ok is True


def test_without_an_available_cloud_the_size_is_counted_first():
    # The size decides between a degraded edge answer (it fits) and a refusal (it does not).
    d, classifier, counter = _decide(_req("prove it " * 100), "complex", exact=450, live=DOWN)
    assert counter.calls == 1 and classifier.calls == []
    assert (d.route, d.degraded, d.prompt_tokens_exact) == ("edge", "cloud-unavailable", True)
    d, classifier, counter = _decide(_req("prove it " * 100), "complex", exact=1200, live=DOWN)
    assert counter.calls == 1 and d.refusal is not None
    assert d.refusal.kind is RefusalKind.CONTEXT_LENGTH_EXCEEDED and "1200 tokens" in d.refusal.message


def test_requests_a_rule_decides_before_the_classifier_are_counted_first():
    multi = _req("hi", "hello, how can I help?", "summarise this " * 60)
    override = _req("prove it " * 100, headers={"x-edgecloud-route": "cloud"})
    for r in (multi, override):
        d, classifier, counter = _decide(r, "complex", exact=450)
        assert counter.calls == 1 and classifier.calls == [] and d.prompt_tokens_exact
        assert d.label is None


def test_a_bound_under_the_budget_is_never_counted():
    classifier, counter = Recording("complex"), Counter(50)
    d = Router(RouterConfig(max_prompt_share=0.3), classifier).decide(
        _req("prove it"), UP, 120, prompt_tokens_exact=False, count_tokens=counter)
    assert counter.calls == 0 and len(classifier.calls) == 1 and d.prompt_tokens == 120
