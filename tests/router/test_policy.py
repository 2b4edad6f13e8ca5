"""The routing policy as pure logic: every rule, in order, with its recorded reason.

The classifier here is a fixed-answer stand-in so each rule can be driven exactly; the real ONNX
classifier is exercised end to end in test_routing_e2e.py and in tests/intent.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from edge.app import refusal_error
from edge.config import RouterConfig, Settings
from edge.router import LiveState, RefusalKind, Router
from edge.schemas import parse_chat_request


@dataclass
class Fixed:
    label: str
    confidence: float
    latency_ms: float = 0.01

    def classify(self, text: str) -> Fixed:
        return self


SETTINGS = Settings()
UP = LiveState(edge_ready=True, cloud_enabled=True, cloud_available=True, cloud_ttft_p95_s=0.8)
DOWN = LiveState(edge_ready=True, cloud_enabled=True, cloud_available=False)
NO_CLOUD = LiveState(edge_ready=True, cloud_enabled=False, cloud_available=False)


def req(*turns: str, model: str = "edgecloud-auto", headers: dict | None = None, **body):
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
    return parse_chat_request({"model": model, "messages": messages, **body}, SETTINGS, headers or {})


def decide(r, live=UP, label="simple", conf=0.99, tokens=20, **cfg):
    return Router(RouterConfig(**cfg), Fixed(label, conf)).decide(r, live, tokens)


def test_simple_confident_goes_to_edge():
    d = decide(req("Where is the restroom?"))
    assert (d.route, d.reason, d.label) == ("edge", "classifier:simple:0.99", "simple")
    assert d.rules == ["classifier:simple:0.99"] and not d.hedge


def test_complex_goes_to_cloud_and_never_edge():
    d = decide(req("prove that sqrt(2) is irrational"), label="complex", conf=0.97)
    assert (d.route, d.reason) == ("cloud", "classifier:complex:0.97")
    assert d.edge_ok is False


def test_low_confidence_simple_goes_to_cloud_hedged_in_realtime():
    d = decide(req("can u help me"), conf=0.6)
    assert d.route == "cloud" and d.reason.endswith(":low-confidence")
    assert d.hedge and d.hedge_delay_s == pytest.approx(0.8)  # the cloud's live P95 TTFT
    assert decide(req("x"), conf=0.6, hedge_delay_s=0.3).hedge_delay_s == 0.3
    assert decide(req("x"), conf=0.6, live=LiveState(cloud_enabled=True, cloud_available=True)).hedge_delay_s == 1.5


@pytest.mark.parametrize(("scenario", "route", "hedge"), [("realtime", "cloud", True), ("generation", "cloud", False),
                                                         ("batch", "edge", False)])
def test_scenario_profiles_lean_borderline_requests(scenario, route, hedge):
    d = decide(req("hmm", headers={"x-edgecloud-scenario": scenario}), conf=0.75)
    assert (d.route, d.hedge, d.scenario) == (route, hedge, scenario)


def test_generation_profile_sends_long_answers_to_cloud():
    d = decide(req("Describe the mall", max_tokens=1000, headers={"x-edgecloud-scenario": "generation"}))
    assert d.route == "cloud" and d.reason == "scenario:generation:long-answer"


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (req("I need a taxi", "Sure, where to?", "The airport"), "multi-turn"),
        (req("Hi", "Hello", model="edgecloud-auto"), "multi-turn"),
        (req("What's the weather?", tools=[{"type": "function", "function": {"name": "w"}}]), "tools:not-loaded"),
        (req("Give JSON", response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}}}),
         "response-format:unsupported:minimum"),
        (parse_chat_request({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "x"}}]}]},
            SETTINGS), "images"),
    ],
)
def test_hard_rules_go_to_cloud_before_the_classifier(request_, reason):
    d = decide(request_)
    assert (d.route, d.reason) == ("cloud", reason)
    assert d.label is None, "the classifier does not run when a hard rule fired"


def test_two_user_messages_count_as_multi_turn():
    r = parse_chat_request({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
                           SETTINGS)
    assert decide(r).reason == "multi-turn"


def test_prompt_share_of_the_edge_context():
    live = LiveState(edge_ready=True, edge_n_ctx=1000, cloud_enabled=True, cloud_available=True)
    assert decide(req("x"), live=live, tokens=299).route == "edge"
    d = decide(req("x"), live=live, tokens=301)
    assert (d.route, d.reason) == ("cloud", "prompt-size")
    d = decide(req("x"), live=live, tokens=301, max_prompt_share=0.5)
    assert d.route == "edge"


@pytest.mark.parametrize(("model", "header", "route"), [
    ("edgecloud-edge", None, "edge"), ("edgecloud-cloud", None, "cloud"),
    ("edgecloud-auto", "cloud", "cloud"), ("edgecloud-auto", "edge", "edge"),
])
def test_caller_override(model, header, route):
    headers = {"x-edgecloud-route": header} if header else {}
    d = decide(req("prove the Riemann hypothesis", model=model, headers=headers), label="complex")
    assert (d.route, d.reason, d.override) == (route, "override", True)


def test_operator_can_forbid_overrides():
    d = decide(req("prove it", model="edgecloud-edge"), label="complex", allow_override=False)
    assert d.route == "cloud" and "override-forbidden" in d.rules


def test_forced_cloud_without_cloud_is_a_clear_503():
    d = decide(req("hi", model="edgecloud-cloud"), live=NO_CLOUD)
    assert d.refusal is not None and d.refusal.kind is RefusalKind.CLOUD_UNCONFIGURED
    error = refusal_error(d.refusal)  # the app, not the router, gives the refusal its status
    assert (error.status, error.code, error.type) == (503, "cloud_unconfigured", "server_error")


def test_cloud_down_simple_low_confidence_goes_to_edge_degraded():
    d = decide(req("hmm"), live=DOWN, conf=0.5)
    assert (d.route, d.degraded) == ("edge", "cloud-unavailable")
    assert d.reason.endswith(":degraded")


def test_cloud_down_multi_turn_is_answered_degraded_on_the_edge():
    d = decide(req("I need a taxi", "Where to?", "Airport"), live=DOWN)
    assert (d.route, d.reason, d.degraded) == ("edge", "multi-turn:degraded", "cloud-unavailable")


def test_cloud_down_complex_is_a_503_that_says_why():
    d = decide(req("写一个校验IPv6的正则"), live=DOWN, label="complex")
    assert d.refusal is not None and refusal_error(d.refusal).status == 503
    assert "needs the cloud" in d.refusal.message
    d = decide(req("写一个校验IPv6的正则"), live=NO_CLOUD, label="complex")
    assert d.refusal is not None and "No cloud provider is configured" in d.refusal.message


def test_edge_busy_goes_to_cloud():
    busy = LiveState(edge_ready=True, edge_expected_ttft_s=5.0, cloud_enabled=True, cloud_available=True)
    d = decide(req("Where is gate B?"), live=busy)
    assert (d.route, d.reason) == ("cloud", "edge-busy")
    # The batch profile waits for the edge instead.
    d = decide(req("Where is gate B?", headers={"x-edgecloud-scenario": "batch"}), live=busy)
    assert d.route == "edge"
    full = LiveState(edge_ready=True, edge_queue_full=True, cloud_enabled=True, cloud_available=True)
    assert decide(req("Where is gate B?"), live=full).reason == "edge-busy"


def test_edge_not_loaded_goes_to_cloud_or_503():
    loading = LiveState(edge_ready=False, cloud_enabled=True, cloud_available=True)
    assert decide(req("Hi"), live=loading).reason == "edge-unavailable"
    d = decide(req("Hi"), live=LiveState(edge_ready=False))
    assert d.refusal is not None and d.refusal.kind is RefusalKind.NO_BACKEND


def test_decision_is_explainable_as_json():
    out = decide(req("hmm"), conf=0.5).as_dict()
    assert {"route", "reason", "label", "confidence", "prompt_tokens", "rules", "hedge"} <= set(out)
    assert out["refusal"] is None


def test_a_refusal_is_a_kind_and_a_reason_the_app_maps_to_a_status():
    d = decide(req("Where is the restroom?"), live=NO_CLOUD, tokens=5000)  # longer than the 2048-token context
    assert d.refusal is not None and d.refusal.kind is RefusalKind.CONTEXT_LENGTH_EXCEEDED
    assert d.as_dict()["refusal"] == {"kind": "context_length_exceeded", "message": d.refusal.message,
                                      "param": "messages"}
    error = refusal_error(d.refusal)
    assert (error.status, error.type, error.param, error.code) == (
        400, "invalid_request_error", "messages", "context_length_exceeded")


def test_every_refusal_kind_has_a_status_and_the_router_chooses_none():
    import inspect

    import edge.router
    from edge.app import REFUSAL_STATUS

    assert set(REFUSAL_STATUS) == set(RefusalKind)
    source = inspect.getsource(edge.router)
    assert "APIError" not in source and ".errors" not in source
