"""What the pipeline needs from its parts, as typed protocols.

The pipeline routes one request to whichever backend the router chose, falls back when a backend
fails, and stores safe answers in the cache; it should not care which class stands behind each
role. These protocols name that contract, so a scripted fake (``tests/pipeline``) or a new backend
(another local runtime, another cloud client) can stand in without reading the pipeline:

- ``GeneratingBackend``: start (the first ``__anext__`` of ``generate``, which raises
  ``APIError`` before any event when the backend is busy or down), stream events (``TextDelta``
  or ``ToolCallDelta``, then one ``Finish``) and cancel (``aclose()`` on the stream: the backend
  stops its work).
- ``EdgeBackend``: the on-device model (``edge.local_model.LocalModel``), with the live state the
  router weighs: loaded, queue full, expected first-token time, context size, what it can do with
  tools, and the size of a prompt in its own tokens.
- ``CloudRouteBackend``: the cloud (``edge.cloud_backend.CloudBackend``), with its live state:
  configured, reachable (breaker closed), recent first-token P95.
- ``AnswerCacheStore``: the answer cache (``edge.cache.AnswerCache``): per-request policy, a
  counted ``lookup`` for requests, a side-effect-free ``peek`` for previews, and ``store``;
  ``semantic_enabled`` says a lookup may take milliseconds (the pipeline runs it in a thread).
- ``KnowledgeSource``: venue knowledge (``edge.knowledge.KnowledgeBase``): the evidence for a
  question, whether finding it runs an embedding model (then off the loop), the grounding budget.

``tests/gateway/test_backend_protocols.py`` holds the real classes to these protocols.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .types import ChatRequest, Finish, TextDelta, ToolCallDelta

if TYPE_CHECKING:
    from .cache.answer_cache import CacheHit
    from .cache.policy import CachePolicy
    from .knowledge.grounding import Evidence

Events = AsyncIterator[TextDelta | ToolCallDelta | Finish]


@runtime_checkable
class GeneratingBackend(Protocol):
    """Streams one answer: deltas, then one ``Finish``; ``aclose()`` on the stream cancels it."""

    def generate(self, req: ChatRequest) -> Events: ...


@runtime_checkable
class EdgeBackend(GeneratingBackend, Protocol):
    @property
    def ready(self) -> bool:
        """A model is loaded and may be asked."""
        ...

    @property
    def queue_full(self) -> bool:
        """A new request would be refused as busy (503 + Retry-After) right now."""
        ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def tools_state(self) -> str:
        """The loaded model's tool-call format, or why it has none (``edge.tools.edge_tools_state``)."""
        ...

    def expected_ttft_s(self) -> float: ...

    def count_prompt_tokens(self, req: ChatRequest) -> int: ...

    def prompt_token_bound(self, req: ChatRequest) -> int: ...  # >= count_prompt_tokens, no tokenizer


@runtime_checkable
class CloudRouteBackend(GeneratingBackend, Protocol):
    @property
    def enabled(self) -> bool: ...

    def available(self) -> bool: ...

    def ttft_p95_s(self) -> float | None: ...


@runtime_checkable
class AnswerCacheStore(Protocol):
    @property
    def semantic_enabled(self) -> bool: ...

    def policy(self, req: ChatRequest) -> CachePolicy: ...

    def lookup(self, req: ChatRequest, policy: CachePolicy) -> CacheHit | None:
        """The answer a request gets from the cache: counts a hit or a miss, refreshes LRU order."""
        ...

    def peek(self, req: ChatRequest, policy: CachePolicy) -> CacheHit | None:
        """What ``lookup`` would return, with no side effect: no count, no LRU refresh."""
        ...

    def store(
        self,
        req: ChatRequest,
        text: str,
        finish: Finish,
        *,
        route: str,
        model: str,
        policy: CachePolicy,
        degraded: bool = False,
        hedge_loser: bool = False,
    ) -> bool: ...


@runtime_checkable
class KnowledgeSource(Protocol):
    @property
    def dense_enabled(self) -> bool:
        """``evidence`` runs an embedding model (tens of ms): call it in a worker thread."""
        ...

    @property
    def max_prompt_tokens(self) -> int:
        """The grounding block's budget in the backend's prompt."""
        ...

    def evidence(self, question: str) -> Evidence | None: ...


__all__ = ["AnswerCacheStore", "CloudRouteBackend", "EdgeBackend", "Events", "GeneratingBackend", "KnowledgeSource"]
