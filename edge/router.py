"""The routing policy: one explainable decision per request, edge or cloud.

Pure decision logic: it imports no web framework and no backend, so it runs the same inside the
gateway, behind ``POST /v1/route``, in ``edgecloud route`` and in the benchmark. The steps run in
the order the product promises, and each one that fires is recorded, so an operator can always
see why a request went where it went:

1. caller override (model name or ``x-edgecloud-route``), unless the operator forbids it;
2. hard rules: earlier turns, images, a prompt too long for the edge, and tools or a response
   schema the device cannot hold its model to (``edge/constrained.py`` names why);
3. the intent classifier's label and confidence (a single-turn message that only an exact token
   count could keep under the size rule is classified before it is counted, while a cloud can take
   it: a complex one goes there whatever its size, uncounted; see ``Router.decide``);
   then venue knowledge: strong evidence keeps a simple venue question on the edge, none sends it
   away (or, in strict mode, answers with the operator's "ask staff" text);
4. the scenario profile (realtime / generation / batch) and how it leans on borderline requests;
5. live state: edge queue too long, edge not loaded, cloud unreachable (degraded edge answer) or
   no cloud for a request the edge must not answer (a refusal that says why, never a bad answer);
6. hedging: a borderline request sent to the cloud starts the edge too if the cloud is slow.

A request no backend may take gets a ``Refusal`` in its decision (a ``RefusalKind`` and a message);
the router chooses no HTTP status: the app maps each kind to one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Protocol

from .config import RouterConfig
from .constrained import blocker_param, edge_blocker, edge_note
from .types import ChatRequest


@dataclass(frozen=True)
class Profile:
    """How a scenario trades latency, throughput and cost."""

    name: str
    edge_ttft_budget_s: float  # past this expected wait, an edge request goes to the cloud
    # Added to the confidence threshold: > 0 leans borderline requests to the cloud, < 0 to the edge.
    threshold_shift: float
    hedge: bool
    long_answer_tokens: int | None  # max_tokens above this goes to the cloud (decode speed matters)


PROFILES: dict[str, Profile] = {
    # Kiosk chat: time to first token first. Borderline -> cloud, hedged by the edge.
    "realtime": Profile("realtime", 1.5, 0.0, True, None),
    # Longer answers: tokens/s first. The cloud decodes a 7B-class answer faster than an Orin NX.
    "generation": Profile("generation", 4.0, 0.05, False, 512),
    # Cost first: keep more borderline requests on the edge, and wait for it if needed.
    "batch": Profile("batch", 60.0, -0.10, False, None),
}


class Classifier(Protocol):
    def classify(self, text: str) -> Any: ...  # -> models.intent.runtime.IntentResult


@dataclass
class LiveState:
    """What the router knows about the backends right now."""

    edge_ready: bool = True
    edge_expected_ttft_s: float = 0.0
    edge_queue_full: bool = False
    edge_n_ctx: int = 2048
    edge_tools: str = "not-loaded"  # the loaded model's tool-call format, or why it has none (edge/tools.py)
    cloud_enabled: bool = False
    cloud_available: bool = False
    cloud_ttft_p95_s: float | None = None


class RefusalKind(str, Enum):
    """Why no backend may take a request. The value is the OpenAI-style error ``code``; the HTTP
    layer, not the router, gives each kind its status (``edge.app.refusal_error``)."""

    EDGE_UNAVAILABLE = "edge_unavailable"  # forced to the edge, and the model is not loaded
    CLOUD_UNCONFIGURED = "cloud_unconfigured"  # forced to the cloud, and none is configured
    CLOUD_UNAVAILABLE = "cloud_unavailable"  # needs the cloud (or was forced there), which cannot take it
    NO_BACKEND = "no_backend"  # the model is not loaded and the cloud cannot take it
    UNSUPPORTED_PARAMETER = "unsupported_parameter"  # tools or a schema the device cannot honour, no cloud
    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"  # longer than the device's context, no cloud


@dataclass(frozen=True)
class Refusal:
    """The router's "no": which kind, a message for the caller, and the request field at fault."""

    kind: RefusalKind
    message: str
    param: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "message": self.message, "param": self.param}


@dataclass
class Decision:
    route: str  # "edge" | "cloud"
    reason: str
    scenario: str
    rules: list[str] = field(default_factory=list)
    label: str | None = None
    confidence: float | None = None
    prompt_tokens: int = 0
    # False: prompt_tokens is an upper bound (the prompt fits by it; see LocalModel.prompt_token_bound).
    prompt_tokens_exact: bool = True
    classifier_ms: float | None = None
    # Which stage of the classifier decided: "ngram", or "encoder" for a request the n-gram model was unsure of.
    classifier_stage: str | None = None
    # The confidence a simple label needs to stay on the edge, and where that number comes from.
    threshold: float | None = None
    threshold_source: str | None = None
    edge_ok: bool = True  # the edge may answer it (as a fall-back or hedge)
    cloud_ok: bool = True  # the cloud may answer it
    hedge: bool = False
    hedge_delay_s: float | None = None
    degraded: str | None = None
    override: bool = False
    refusal: Refusal | None = None  # no backend may answer: the request is refused, and why
    knowledge: Any = None  # edge.knowledge.Evidence: the passages found for a venue question
    knowledge_refusal: bool = False  # strict mode, no evidence: the operator's "ask staff" text answers

    def as_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("refusal", "knowledge")}
        data["rules"] = list(self.rules)
        data["refusal"] = self.refusal.as_dict() if self.refusal is not None else None
        if self.knowledge is not None:
            data["knowledge"] = self.knowledge.as_dict()
        return data


def _card_threshold_source(classifier: Classifier | None) -> str:
    """How the classifier's card says its threshold was chosen (read once: the card is copied on access)."""
    if classifier is None:
        return "default"
    card = getattr(classifier, "card", None)
    th = card.get("thresholds", {}) if isinstance(card, dict) else {}
    if th.get("chosen_on"):
        return f"model card {getattr(classifier, 'version', '')}: chosen on {th['chosen_on']}; {th.get('objective')}"
    return "model card"


class Router:
    def __init__(self, config: RouterConfig, classifier: Classifier | None = None) -> None:
        self.config = config
        self.classifier = classifier
        self._card_source = _card_threshold_source(classifier)

    def set_classifier(self, classifier: Classifier | None) -> None:
        """Hot-swap the classifier (a model bundle update); in-flight decisions keep the old one."""
        self.classifier = classifier
        self._card_source = _card_threshold_source(classifier)

    def threshold(self) -> float:
        """The operator's threshold, else the one the classifier was trained with, else 0.8."""
        if self.config.confidence_threshold is not None:
            return self.config.confidence_threshold
        return float(getattr(self.classifier, "confidence_threshold", 0.8) or 0.8)

    def threshold_source(self) -> str:
        """Where ``threshold()`` comes from, for the decision's explanation."""
        if self.config.confidence_threshold is not None:
            return "operator: [router] confidence_threshold"
        return self._card_source

    def scenario_for(self, req: ChatRequest) -> Profile:
        name = (req.scenario_header or self.config.scenario).strip().lower()
        return PROFILES.get(name, PROFILES[self.config.scenario])

    def prompt_budget(self, live: LiveState) -> int:
        """The largest prompt, in tokens, the edge is given; a larger one goes to the cloud."""
        return int(self.config.max_prompt_share * live.edge_n_ctx)

    def decide(
        self, req: ChatRequest, live: LiveState, prompt_tokens: int, evidence: Any = None, *,
        prompt_tokens_exact: bool = True, count_tokens: Callable[[], int] | None = None, intent: Any = None,
    ) -> Decision:
        """The decision for one request.

        ``prompt_tokens`` is the prompt's size, exact or (``prompt_tokens_exact=False``) an upper
        bound. ``intent``: the classifier's result for the last user message when the caller has it
        already (the gateway passes the n-gram stage's, then the final one; ``edge/pipeline.py``);
        None: the router classifies, if the decision gets that far.

        When that bound is over the edge's budget, ``count_tokens`` gives the exact size, and it is
        called only if the decision depends on it: a single-turn message the classifier calls
        complex goes to an available cloud whatever its size, so it is classified first and its
        tokens are never counted (the count is the tokenizer over the whole text, milliseconds for a
        pasted page). Without an available cloud the size decides between a degraded edge answer and a
        refusal, so it is counted first, as for every other request.
        """
        pre_classified = None
        if count_tokens is not None and prompt_tokens > self.prompt_budget(live):
            pre_classified = self._difficulty_before_size(req, live, intent)
            if pre_classified is not None and pre_classified.label != "simple":
                return self._complex_unsized(req, live, prompt_tokens, pre_classified, evidence)
            prompt_tokens, prompt_tokens_exact = count_tokens(), True
        profile = self.scenario_for(req)
        d = Decision(route="edge", reason="", scenario=profile.name, prompt_tokens=prompt_tokens,
                     prompt_tokens_exact=prompt_tokens_exact, knowledge=evidence)
        rules = d.rules

        # What each backend may take at all. Earlier turns and a long (but fitting) prompt go to
        # the cloud by rule, yet the edge may still answer them, degraded, when the cloud cannot.
        edge_incapable = self._edge_incapable(req, live, prompt_tokens)
        fits = prompt_tokens < live.edge_n_ctx
        d.edge_ok = edge_incapable in (None, "multi-turn") or (edge_incapable == "prompt-size" and fits)

        # 1. Caller override.
        forced = self._override(req)
        if forced is not None:
            if not self.config.allow_override:
                rules.append("override-forbidden")
            else:
                d.override = True
                rules.append(f"override:{forced}")
                d.route, d.reason = forced, "override"
                if forced == "edge":
                    d.cloud_ok = False
                    if not live.edge_ready:
                        d.refusal = Refusal(RefusalKind.EDGE_UNAVAILABLE, "The on-device model is not loaded.")
                    return d
                d.edge_ok = False  # the caller asked for the cloud: never answer it on the edge
                if not live.cloud_enabled:
                    d.refusal = Refusal(RefusalKind.CLOUD_UNCONFIGURED,
                                        "No cloud provider is configured on this gateway.")
                elif not live.cloud_available:
                    d.refusal = Refusal(RefusalKind.CLOUD_UNAVAILABLE,
                                        "The cloud is unreachable right now (circuit open).")
                return d

        # 2. Hard rules.
        if edge_incapable is not None:
            rules.append(edge_incapable)
            if edge_incapable.startswith(("tools:", "response-format:", "fields:")) and not live.cloud_enabled:
                param = blocker_param(edge_incapable)
                d.route, d.reason = "cloud", edge_incapable
                d.refusal = Refusal(RefusalKind.UNSUPPORTED_PARAMETER,
                                    f"The on-device model cannot honour '{param}' here ({edge_incapable}) and "
                                    "no cloud provider is configured to take it.", param)
                return d
            if edge_incapable == "prompt-size" and not fits and not live.cloud_available:
                d.route, d.reason = "cloud", "prompt-size"
                d.refusal = Refusal(
                    RefusalKind.CONTEXT_LENGTH_EXCEEDED,
                    f"The prompt has about {prompt_tokens} tokens: more than the on-device model's context "
                    f"({live.edge_n_ctx}) and no cloud is available to take it.",
                    "messages",
                )
                return d
            return self._to_cloud(d, edge_incapable, live, allow_degraded=d.edge_ok)

        note = edge_note(req, live.edge_tools) if req.has_tools or req.has_schema else None
        if note is not None:
            rules.append(note)  # the device may answer it, under a grammar

        # Strict venue knowledge: a venue question nothing in the pack answers gets the operator's
        # "ask staff" text, whatever its difficulty: no backend knows this venue better than its pack.
        if evidence is not None and evidence.refuse:
            rules.append(evidence.rule)
            d.route, d.reason, d.knowledge_refusal, d.cloud_ok = "edge", "knowledge:none:refused", True, False
            return d

        # 3. The classifier (single-turn text only: hard rules caught the rest).
        borderline = False
        if self.classifier is not None:
            result = pre_classified if pre_classified is not None else intent
            if result is None:
                result = self.classifier.classify(req.last_user_message)
            tag = self._record_label(d, result)
            if d.label != "simple":
                d.edge_ok = False
                return self._to_cloud(d, tag, live, allow_degraded=False)
            d.threshold = round(self.threshold() + profile.threshold_shift, 4)
            d.threshold_source = self.threshold_source()
            borderline = d.confidence < d.threshold
            d.reason = tag
        else:
            # Difficulty unknown (the classifier failed to load): treat it as borderline, so a hard
            # request is not silently answered by the small model while the cloud is there.
            rules.append("no-classifier")
            d.reason = "no-classifier"
            borderline = True

        # 3b. Venue knowledge (edge/knowledge): a small additive input. Strong evidence makes a venue
        # question a good edge candidate (the answer is in the prompt); none makes it a poor one.
        if evidence is not None and evidence.venue:
            rules.append(evidence.rule)
            if evidence.strength == "strong":
                borderline, d.reason = False, evidence.rule
            elif evidence.strength == "none":
                return self._to_cloud(d, "knowledge:none", live, allow_degraded=True)

        # 4. Scenario profile.
        if profile.long_answer_tokens and (req.max_tokens or 0) > profile.long_answer_tokens:
            rules.append(f"scenario:{profile.name}:long-answer")
            return self._to_cloud(d, f"scenario:{profile.name}:long-answer", live, allow_degraded=True)
        if borderline:
            rules.append("low-confidence" if d.threshold is None else f"low-confidence:<{d.threshold:.2f}")
            d = self._to_cloud(d, f"{d.reason}:low-confidence", live, allow_degraded=True)
            if d.route == "cloud" and profile.hedge and self.config.hedge and live.edge_ready:
                d.hedge = True
                d.hedge_delay_s = self._hedge_delay(live)
                rules.append(f"hedge:{d.hedge_delay_s:.2f}s")
            return d

        # 5. Live state of the edge.
        if not live.edge_ready:
            rules.append("edge-unavailable")
            return self._to_cloud(d, "edge-unavailable", live, allow_degraded=False, edge_down=True)
        if live.edge_queue_full or live.edge_expected_ttft_s > profile.edge_ttft_budget_s:
            if live.cloud_available:
                rules.append(f"edge-busy:{live.edge_expected_ttft_s:.2f}s")
                d.route, d.reason = "cloud", "edge-busy"
                return d
            rules.append("edge-busy:no-cloud")
        d.route = "edge"
        d.cloud_ok = live.cloud_available
        return d

    # ----- helpers ----------------------------------------------------------------------------
    def _difficulty_before_size(self, req: ChatRequest, live: LiveState, intent: Any = None) -> Any:
        """The classifier's result for a request whose size alone would not send it away, or None.

        Only for a plain single-turn message (no override, tools, schema or images: those rules
        come first and need no size) while the cloud can take it: then a complex label routes it
        whatever its size, so its tokens need not be counted.
        """
        if self.classifier is None or not live.cloud_available or self._override(req) is not None:
            return None
        if self._edge_incapable(req, live, 0) is not None:
            return None
        return intent if intent is not None else self.classifier.classify(req.last_user_message)

    def _complex_unsized(self, req: ChatRequest, live: LiveState, bound: int, result: Any,
                         evidence: Any) -> Decision:
        """A complex message over the budget by its size bound: to the cloud, never to the edge.

        The rules list shows the classifier's label alone; ``prompt_tokens`` stays the bound, marked
        inexact, because the exact count would not change where the request goes.
        """
        d = Decision(route="cloud", reason="", scenario=self.scenario_for(req).name, prompt_tokens=bound,
                     prompt_tokens_exact=False, knowledge=evidence, edge_ok=False)
        tag = self._record_label(d, result)
        return self._to_cloud(d, tag, live, allow_degraded=False)

    @staticmethod
    def _record_label(d: Decision, result: Any) -> str:
        """Write the classifier's label, confidence and time into the decision; returns its rule tag."""
        d.label, d.confidence = result.label, float(result.confidence)
        d.classifier_ms = getattr(result, "latency_ms", None)
        d.classifier_stage = getattr(result, "stage", None)
        tag = f"classifier:{d.label}:{d.confidence:.2f}"
        d.rules.append(tag)
        return tag

    def _override(self, req: ChatRequest) -> str | None:
        header = (req.route_header or "").strip().lower()
        if header in ("edge", "cloud"):
            return header
        if req.route_name == "edgecloud-edge":
            return "edge"
        if req.route_name == "edgecloud-cloud":
            return "cloud"
        return None

    def _edge_incapable(self, req: ChatRequest, live: LiveState, prompt_tokens: int) -> str | None:
        if req.has_tools or req.has_schema or req.extra.get("cloud_only"):
            why = edge_blocker(req, live.edge_tools)
            if why is not None:
                return why
        if req.has_images:
            return "images"
        if prompt_tokens > self.prompt_budget(live):
            return "prompt-size"
        if req.is_multi_turn:
            return "multi-turn"
        return None

    def _hedge_delay(self, live: LiveState) -> float:
        if self.config.hedge_delay_s is not None:
            return self.config.hedge_delay_s
        p95 = live.cloud_ttft_p95_s
        if p95 is None:
            return self.config.hedge_delay_default_s
        return max(self.config.hedge_delay_min_s, p95)

    def _to_cloud(
        self, d: Decision, reason: str, live: LiveState, *, allow_degraded: bool, edge_down: bool = False
    ) -> Decision:
        d.route, d.reason = "cloud", reason
        if live.cloud_available:
            return d
        # No cloud: a request the edge may attempt is answered there, marked degraded.
        edge_can = allow_degraded and live.edge_ready and not edge_down and d.label in (None, "simple")
        if edge_can and d.edge_ok:
            d.route = "edge"
            d.degraded = "cloud-unavailable"
            d.reason = f"{reason}:degraded"
            d.edge_ok = True
            d.rules.append("cloud-unavailable:edge-degraded")
            return d
        d.rules.append("cloud-unavailable")
        what = "No cloud provider is configured" if not live.cloud_enabled else "The cloud is unreachable"
        if edge_down:
            d.refusal = Refusal(RefusalKind.NO_BACKEND,
                                f"The on-device model is not loaded and {what[0].lower() + what[1:]}.")
        else:
            d.refusal = Refusal(
                RefusalKind.CLOUD_UNAVAILABLE,
                f"{what}, and this request ({reason}) needs the cloud: the on-device model would answer "
                "it badly.",
            )
        return d
