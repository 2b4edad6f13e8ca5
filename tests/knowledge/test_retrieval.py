"""Retrieval, evidence, grounded prompts and the router's knowledge input, without HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge.config import KnowledgeConfig, RouterConfig
from edge.knowledge import KnowledgeBase, KnowledgeIndex, ground
from edge.knowledge.grounding import grounded_request
from edge.knowledge.service import scrub_question
from edge.knowledge.text import query_features, stem
from edge.router import LiveState, Router
from edge.types import ChatRequest, Message

EXAMPLE = Path(__file__).resolve().parents[2] / "edge" / "knowledge" / "packs" / "harbourview-mall.md"


@pytest.fixture(scope="module")
def base() -> KnowledgeBase:
    kb = KnowledgeBase(KnowledgeConfig(uncovered_min_count=2))
    kb.load_path(EXAMPLE)
    return kb


@pytest.mark.parametrize(("question", "fact"), [
    ("Where is the restroom?", "restroom-l1"),
    ("wher is the tiolet", "restroom-l1"),  # two typos, repaired against the pack's words
    ("洗手间在哪里？", "restroom-l1"),
    ("停车费多少钱？", "parking-price"),
    ("Where's H&M?", "shop-handm"),
    ("hey, can I get on the internet here? free wifi?", "wifi"),
])
def test_the_right_fact_is_found(base: KnowledgeBase, question: str, fact: str) -> None:
    evidence = base.evidence(question)
    assert evidence is not None and evidence.top is not None
    assert fact in [p.fact.id for p in evidence.found]
    assert evidence.strength in ("strong", "weak") and evidence.venue


def test_chinese_question_gets_the_chinese_fact_and_wording(base: KnowledgeBase) -> None:
    evidence = base.evidence("停车场在哪一层？")
    assert evidence.top.fact.lang == "zh" and evidence.lang == "zh"
    assert "服务台" in evidence.refusal


@pytest.mark.parametrize("question", ["Where is the Gucci boutique?", "有保龄球馆吗？",
                                      "Where is the Louis Vuitton store?"])
def test_uncovered_venue_questions_have_no_evidence(base: KnowledgeBase, question: str) -> None:
    evidence = base.evidence(question)
    assert evidence.venue and evidence.strength == "none" and evidence.refuse
    assert evidence.grounding == ()


def test_a_general_question_is_not_a_venue_question(base: KnowledgeBase) -> None:
    evidence = base.evidence("Translate 'good morning' into French.")
    assert not evidence.venue and not evidence.refuse


def test_lenient_mode_never_refuses() -> None:
    kb = KnowledgeBase(KnowledgeConfig(mode="lenient"))
    kb.load_path(EXAMPLE)
    evidence = kb.evidence("Where is the Louis Vuitton store?")
    assert evidence.strength == "none" and not evidence.refuse


def test_uncovered_questions_are_scrubbed_and_thresholded() -> None:
    kb = KnowledgeBase(KnowledgeConfig(uncovered_min_count=2))
    kb.load_path(EXAMPLE)
    kb.evidence("Is there an ice rink? call me on 13812345678")
    assert kb.uncovered() == []  # asked once: never shown
    kb.evidence("Is there an ice rink? Call me on 13912345678")
    assert kb.uncovered() == [{"question": "is there an ice rink? call me on #", "count": 2}]
    assert scrub_question("Mail bob@example.com or see https://x.y/z") == "mail <email> or see <link>"


def test_stemming_and_features_are_consistent() -> None:
    assert stem("closing") == stem("closes") == stem("closed") == stem("close")
    names = [f.name for f in query_features("请问洗手间在哪里", {}, None)]
    assert "b:洗手" in names and "c:洗" in names and "b:在哪" not in names


def test_index_handles_empty_questions(base: KnowledgeBase) -> None:
    assert base.evidence("   ") is None
    assert KnowledgeIndex([]).search("toilet") == []


def _req(question: str, system: str | None = "You are a kiosk.") -> ChatRequest:
    messages = [Message("system", system)] if system else []
    return ChatRequest(messages=[*messages, Message("user", question)], temperature=0.0)


def test_grounding_keeps_the_system_prompt_first(base: KnowledgeBase) -> None:
    req = _req("Where is the pharmacy?")
    grounded = ground(req, base.evidence("Where is the pharmacy?"), 320)
    system = grounded.messages[0].content
    assert system.startswith("You are a kiosk.\n\nVenue facts")
    assert "L1-12" in system and base.refusal("en") in system
    assert grounded.messages[-1].content == "Where is the pharmacy?" and req.messages[0].content == "You are a kiosk."
    # no system prompt: one is added; a general question is left alone
    assert grounded_request(_req("q", None), "facts").messages[0].role == "system"
    assert ground(req, base.evidence("Translate 'good morning' into French."), 320) is req


def test_grounding_respects_the_token_budget(base: KnowledgeBase) -> None:
    evidence = base.evidence("Where can I eat vegetarian or halal food?")
    assert len(evidence.grounding) >= 2
    small = ground(_req("q"), evidence, 40).messages[0].content
    large = ground(_req("q"), evidence, 2000).messages[0].content
    assert small.count("\n[") == 1 < large.count("\n[")  # whole facts only, at least the best one


class _Simple:
    confidence_threshold = 0.8

    def __init__(self, confidence: float) -> None:
        self.confidence = confidence

    def classify(self, text: str):
        from types import SimpleNamespace

        return SimpleNamespace(label="simple", confidence=self.confidence, latency_ms=0.1)


LIVE = LiveState(edge_ready=True, cloud_enabled=True, cloud_available=True)


def test_strong_evidence_keeps_a_borderline_venue_question_on_the_edge(base: KnowledgeBase) -> None:
    router = Router(RouterConfig(), _Simple(0.6))  # below the threshold: borderline
    req = _req("Where is the pharmacy?")
    plain = router.decide(req, LIVE, 20)
    assert plain.route == "cloud"
    decided = router.decide(req, LIVE, 20, evidence=base.evidence("Where is the pharmacy?"))
    assert decided.route == "edge"
    assert decided.reason.startswith("knowledge:strong:shop-careplus-pharmacy:")
    assert any(r.startswith("knowledge:strong") for r in decided.rules)
    out = decided.as_dict()
    assert out["knowledge"]["passages"][0]["id"] == "shop-careplus-pharmacy"
    assert out["knowledge"]["passages"][0]["score"] > 0 and "knowledge" not in out["rules"]


def test_no_evidence_is_not_an_edge_candidate(base: KnowledgeBase) -> None:
    router = Router(RouterConfig(), _Simple(0.99))
    lenient = KnowledgeBase(KnowledgeConfig(mode="lenient"))
    lenient.load_path(EXAMPLE)
    question = "Where is the Louis Vuitton store?"
    decided = router.decide(_req(question), LIVE, 20, evidence=lenient.evidence(question))
    assert decided.route == "cloud" and decided.reason == "knowledge:none"
    strict = router.decide(_req(question), LIVE, 20, evidence=base.evidence(question))
    assert strict.route == "edge" and strict.knowledge_refusal and strict.reason == "knowledge:none:refused"
