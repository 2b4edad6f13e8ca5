"""What the pipeline needs from a backend and from the answer cache, as typed protocols.

The pipeline routes one request to whichever backend the router chose, falls back before the
first token and stores safe answers in the cache; it should not care which class stands behind
each role. These protocols name that contract, so a scripted fake (in tests) or a new backend
(another local runtime, another cloud client) can stand in without reading the pipeline:

- ``GeneratingBackend``: start (the first ``__anext__`` of ``generate``, which raises
  ``APIError`` before any event when the backend is busy or down), stream events (``TextDelta``
  then one ``Finish``), cancel (``aclose()`` on the stream; the backend stops its work) and live
  state for the router.
- ``EdgeBackend``: the on-device model (``edge.local_model.LocalModel``). Its live state is
  readiness, expected first-token time, queue depth against ``config.max_queue`` and context size.
- ``CloudRouteBackend``: the cloud (``edge.cloud_backend.CloudBackend``). Its live state is
  whether it is configured and available, and its recent first-token P95.
- ``AnswerCacheStore``: the answer cache (``edge.cache.AnswerCache``): per-request policy,
  lookup and store; ``semantic_enabled`` says a lookup may take milliseconds (run it in a thread).

``tests/gateway/test_backend_protocols.py`` holds the real classes to these protocols.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .types import ChatRequest, Finish, TextDelta

if TYPE_CHECKING:
    from .cache.answer_cache import CacheHit
    from .cache.policy import CachePolicy


@runtime_checkable
class GeneratingBackend(Protocol):
    """Streams one answer: ``TextDelta`` events, then one ``Finish``; ``aclose()`` cancels it."""

    def generate(self, req: ChatRequest) -> AsyncIterator[TextDelta | Finish]: ...


class QueueLimits(Protocol):
    """The part of the edge model's settings the router's live state reads."""

    max_queue: int


@runtime_checkable
class EdgeBackend(GeneratingBackend, Protocol):
    config: QueueLimits

    @property
    def ready(self) -> bool: ...

    @property
    def queue_depth(self) -> int: ...

    @property
    def n_ctx(self) -> int: ...

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

    def lookup(self, req: ChatRequest, policy: CachePolicy) -> CacheHit | None: ...

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


__all__ = ["AnswerCacheStore", "CloudRouteBackend", "EdgeBackend", "GeneratingBackend", "QueueLimits"]
