"""Helpers shared by the reliability tests (imported as ``reliability.support``).

- ``PinnedClassifier``: pins the intent classifier's verdict so a fault-matrix row tests what the
  gateway does with a broken backend, not how the (separately tested) classifier labels a prompt.
- ``swap_cloud``: points a running in-process gateway at another upstream (refused port, a
  ``.invalid`` host, a TLS server we do not trust) without paying for another model load.
- ``MATRIX_KEY`` / ``render_matrix``: the fault matrix's cells and their table.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cloud_bridge.config import CloudConfig

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
MATRIX_KEY = pytest.StashKey[dict[str, dict[str, str]]]()
COLUMNS = ("auto", "auto+stream", "forced", "forced+stream")
# Secrets and a prompt marker of this test session, fresh each run: the log audit greps for them.
PROC_SECRETS = {
    "admin_token": "adm-" + secrets.token_hex(16),
    "cloud_key": "sk-test-" + secrets.token_hex(20),
    "prompt_marker": "zebra" + secrets.token_hex(6) + "marker",
}
# The child gateway's slow-client deadlines ([server] header_timeout_s, body_timeout_s; defaults 5 s, 15 s),
# short so that the tests which wait them out take seconds.
HEADER_TIMEOUT_S = 2.0
BODY_TIMEOUT_S = 4.0
# Every secret a test of this suite gives a gateway; the session log audit (conftest) greps for them.
SUITE_SECRETS: set[str] = set(PROC_SECRETS.values())


def register_secret(value: str) -> str:
    SUITE_SECRETS.add(value)
    return value

# Short deadlines: every cell must end within these (see ``cloud_bound_s``), never the fake's hang.
FAST_PROVIDER: dict[str, Any] = {
    "connect_timeout_s": 0.5,
    "ttft_timeout_s": 0.8,
    "max_gap_s": 0.8,
    "total_timeout_s": 3.0,
    "max_retries": 1,
    "backoff_base_s": 0.01,
    "backoff_max_s": 0.05,
    "max_response_bytes": 256 * 1024,
    # Keep the breaker out of the matrix: each cell must see its own fault, not an open circuit.
    "breaker_consecutive_failures": 10_000,
    "breaker_min_calls": 10_000,
    "keep_warm_interval_s": 3600.0,
}


def cloud_bound_s(p: dict[str, Any] = FAST_PROVIDER) -> float:
    """The longest the cloud side of one request may take with these settings (all attempts)."""
    attempts = p["max_retries"] + 1
    per_attempt = min(p["total_timeout_s"], p["connect_timeout_s"] + p["ttft_timeout_s"])
    return attempts * per_attempt + p["max_retries"] * p["backoff_max_s"] + p["max_gap_s"]


def provider(base_url: str, **overrides: Any) -> dict[str, Any]:
    return {"name": "fake", "base_url": base_url, "model": "fake-gpt", **FAST_PROVIDER, **overrides}


def cloud_section(base_url: str, **overrides: Any) -> dict[str, Any]:
    return {"warmup": False, "keep_warm": False, "providers": [provider(base_url, **overrides)]}


@dataclass
class IntentVerdict:
    label: str
    confidence: float
    latency_ms: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)


class PinnedClassifier:
    """Always the same verdict; ``confidence`` is changed per row (0.5: borderline -> cloud first,
    0.99: clearly simple -> edge first)."""

    version = "pinned-test"

    def __init__(self, label: str = "simple", confidence: float = 0.5) -> None:
        self.label, self.confidence = label, confidence

    def classify(self, text: str) -> IntentVerdict:
        return IntentVerdict(self.label, self.confidence)


def pin_classifier(gw: Any, confidence: float) -> PinnedClassifier:
    pinned = PinnedClassifier(confidence=confidence)
    gw.services.router.set_classifier(pinned)
    return pinned


def swap_cloud(gw: Any, base_url: str, **overrides: Any) -> None:
    """Replace the gateway's cloud backend by one for ``base_url`` (closing the old one)."""
    from edge.cloud_backend import CloudBackend

    config = CloudConfig.model_validate(cloud_section(base_url, **overrides))
    services = gw.services

    async def swap() -> None:
        on_call = services.obs.observe_cloud_call if services.obs is not None else None
        new = CloudBackend(config, on_call=on_call)
        old, services.cloud, services.pipeline.cloud = services.cloud, new, new
        if old is not None:
            await old.aclose()

    gw.call(swap())


def render_matrix(cells: dict[str, dict[str, str]]) -> str:
    head = ["fault", *COLUMNS]
    rows = [[fault, *(row.get(c, "-") for c in COLUMNS)] for fault, row in cells.items()]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = "+".join("-" * (w + 2) for w in widths)
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |", "|" + line + "|"]
    out += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    legend = ("auto: edgecloud-auto (the policy may use the other backend); forced: the faulty backend asked "
              "for by name (edgecloud-cloud / edgecloud-edge). Cell: status [route|error code] elapsed; "
              "200+err:X+DONE = a stream that ended with an error event, then data: [DONE].")
    return "\n".join(out) + "\n" + legend + "\n"
