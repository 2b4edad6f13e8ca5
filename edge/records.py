"""One finished request, as every observer sees it (metrics, SLA monitor, cost report, JSON log).

The pipeline fills one ``RequestRecord`` per request and hands it to the observers after the last
byte is sent (or the client went away), so observers never sit on the request's critical path.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    started_at: float  # wall clock (time.time()) when the request arrived
    route: str = ""  # "edge" | "cloud" | "cache" | "" (rejected before routing)
    reason: str = ""  # e.g. "multi-turn", "classifier:complex:0.97", "override", "cache:hit", "faq"
    outcome: str = "ok"  # "ok" | "error" | "cancelled" (client went away) | "rejected" (4xx)
    status: int = 200
    error_code: str | None = None
    stream: bool = False
    provider: str | None = None  # cloud provider that answered
    model: str = ""  # the model that answered (GGUF name, cloud model, or the cached answer's model)
    requested_model: str = ""
    scenario: str = ""
    label: str | None = None  # classifier label, when it ran
    confidence: float | None = None
    degraded: str | None = None  # e.g. "cloud-unavailable"
    cache: str | None = None  # "hit" | "miss" | "bypass" | "store" | None
    ttft_ms: float | None = None
    total_ms: float | None = None
    queue_ms: float | None = None
    prefill_ms: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_per_s: float | None = None
    hedged: bool = False
    fallback: bool = False
    # The n-gram stage's route started while the encoder decided (edge/pipeline.py): "kept" when the encoder
    # agreed, "switched" when that start was dropped for the other route; None when nothing started early.
    early_start: str | None = None
    # The backends started early and then dropped ("cloud", "edge", "edge,cloud"): a dropped cloud call was
    # opened and closed within milliseconds; a provider may bill the prompt tokens it had read.
    early_dropped: str | None = None
    # Prompt text: only present when the operator turned prompt logging on.
    prompt: str | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if data.get("prompt") is None:
            data.pop("prompt", None)
        return data
