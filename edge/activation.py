"""Putting a model bundle into service: the intent classifier's slot and the update activator.

``IntentSlot`` holds the classifier the router uses (loaded off the event loop, at start and again
when a bundle brings a new one) and why the last load failed. ``BundleActivator`` is the update
agent's ``Activator`` (``models.fleet.agent``): it swaps in a bundle's parts while streams in
progress finish on the old ones, and checks afterwards that the new model answers.
``answer_fingerprint`` names what answers a request; it is part of every cache key, so a swap of
any of those parts starts the cache afresh.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .types import ChatRequest, Finish, Message

if TYPE_CHECKING:
    from .cache import AnswerCache
    from .config import Settings
    from .knowledge import KnowledgeBase
    from .local_model import LocalModel
    from .router import Router

log = logging.getLogger("edgecloud.services")


def answer_fingerprint(edge: LocalModel, settings: Settings, classifier: Any | None) -> str:
    """The edge model's version, the cloud providers' models and the classifier's version."""
    model = edge.model.version if edge.model else str(edge.model_path)
    cloud = ",".join(f"{p.name}:{p.model}" for p in settings.cloud.providers)
    intent = getattr(classifier, "version", "") if classifier else ""
    return f"edge={model};cloud={cloud};intent={intent}"


class IntentSlot:
    """The intent classifier in service (None until one loads) and the last load's error."""

    def __init__(self, router: Router, default_dir: Path | None, encoder: bool = True) -> None:
        self._router = router
        self._default_dir = default_dir  # the settings' directory, else the installed bundle's
        self._encoder = encoder  # [router] intent_encoder
        self.classifier: Any | None = None
        self.error: str | None = None

    async def load(self, model_dir: Path | None = None) -> None:
        """Load a classifier in a worker thread and hand it to the router; a failure is kept in
        ``error`` and logged, and the router keeps what it had."""
        model_dir = model_dir or self._default_dir
        try:
            from models.intent.runtime import IntentClassifier

            classifier = await asyncio.get_running_loop().run_in_executor(
                None, functools.partial(IntentClassifier.load, model_dir, encoder=self._encoder))
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            log.error("intent classifier not loaded: %s", self.error)
            return
        self.classifier = classifier
        self._router.set_classifier(classifier)
        from models.intent.features import implementation

        # Without the C module (no compiler at install) the decisions are the same, only slower: say which.
        log.info("intent classifier %s loaded (%s; text features in %s; encoder stage %s)", classifier.version,
                 classifier.provider, implementation(), "on" if classifier.encoder is not None else "off")


class BundleActivator:
    """The update agent's ``Activator``: hot-swaps a bundle's model, classifier, FAQ and knowledge."""

    def __init__(
        self,
        settings: Settings,
        edge: LocalModel,
        intent: IntentSlot,
        cache: AnswerCache | None,
        knowledge: KnowledgeBase | None,
    ) -> None:
        self._settings = settings
        self._edge = edge
        self._intent = intent
        self._cache = cache
        self._knowledge = knowledge

    def refresh_fingerprint(self) -> None:
        """Tell the cache what answers now (after a load or a swap)."""
        if self._cache is not None:
            self._cache.set_fingerprint(answer_fingerprint(self._edge, self._settings, self._intent.classifier))

    async def activate(self, version: Any) -> None:
        """Hot-swap a bundle: new requests use it once loaded; streams in progress finish on the old."""
        artifacts = version.artifacts
        if artifacts.get("gguf"):
            await self._edge.swap(Path(artifacts["gguf"]), f"bundle-{version.version}")
        if artifacts.get("intent"):
            await self._intent.load(Path(artifacts["intent"]).parent)
        if artifacts.get("faq") and self._cache is not None:
            self._cache.load_faq(Path(artifacts["faq"]))
        if artifacts.get("knowledge") and self._knowledge is not None:
            await asyncio.to_thread(self._knowledge.load_path, Path(artifacts["knowledge"]))
        self.refresh_fingerprint()

    async def health_check(self) -> bool:
        """The swapped-in model answers one token."""
        edge = self._edge
        if not edge.ready:
            return False
        req = ChatRequest(messages=[Message("user", "Hello")], max_tokens=1, temperature=0.0,
                          request_id="health-check")
        try:
            async for event in edge.generate(req):
                if isinstance(event, Finish):
                    return True
        except Exception as exc:
            log.error("post-activation health check failed: %s", exc)
        return False
