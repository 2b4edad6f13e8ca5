"""The gateway's parts for one app lifespan: what they are, and starting and stopping them.

Everything with state (the loaded model, the cloud connection pools, the cache, the metrics
registry, the update agent) lives on one ``Services`` object per app, never in module globals, so
tests can run several gateways in one process. ``edge.assembly.build_services`` builds it, once
and in order; ``start`` begins the background work (model loads, cloud warm-up, the update agent's
loop) and ``aclose`` ends it. Hot swaps are ``edge.activation.BundleActivator``'s, routes are
``edge.feature_routes``'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .activation import BundleActivator, IntentSlot, answer_fingerprint
from .config import Settings
from .local_model import LocalModel
from .pipeline import Pipeline
from .router import Router

if TYPE_CHECKING:
    from models.fleet.agent import UpdateAgent
    from models.store import ModelStore

    from .cache import AnswerCache
    from .cloud_backend import CloudBackend
    from .knowledge import KnowledgeBase
    from .observability import Observability

log = logging.getLogger("edgecloud.services")


@dataclass(eq=False)
class Services:
    """One gateway's parts; a part that is turned off is None."""

    settings: Settings
    data_dir: Path
    store: ModelStore
    obs: Observability | None
    cache: AnswerCache | None
    cloud: CloudBackend | None
    knowledge: KnowledgeBase | None
    edge: LocalModel
    router: Router
    intent: IntentSlot
    pipeline: Pipeline
    activator: BundleActivator
    agent: UpdateAgent | None
    loaded: asyncio.Event = field(default_factory=asyncio.Event, init=False)  # set once the first loads ended
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list, init=False, repr=False)

    @property
    def classifier(self) -> Any | None:
        """The intent classifier in service (None until loaded, or when it failed to load)."""
        return self.intent.classifier

    @property
    def classifier_error(self) -> str | None:
        return self.intent.error

    def fingerprint(self) -> str:
        """What answers a request now; part of every cache key."""
        return answer_fingerprint(self.edge, self.settings, self.intent.classifier)

    def installed_version(self) -> str | None:
        """The installed bundle's version, else the loaded model's."""
        current = self.store.current()
        if current is not None:
            return str(current.version)
        return self.edge.model.version if self.edge.model is not None else None

    # ----- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Warm the cloud, start observability, load the models and run the update agent; all but
        observability in the background (the app answers meanwhile: a request before the model
        loads gets a 503)."""
        if self.cloud is not None:
            self._tasks.append(asyncio.create_task(self._start_cloud()))
        if self.obs is not None:
            await self.obs.start()
        self._tasks.append(asyncio.create_task(self._load_models()))
        if self.agent is not None:
            self._tasks.append(asyncio.create_task(self.agent.run_forever()))

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        if self.cloud is not None:
            await self.cloud.aclose()
        if self.obs is not None:
            await self.obs.aclose()
        if self.cache is not None:
            self.cache.close()
        await self.edge.aclose()

    async def _start_cloud(self) -> None:
        assert self.cloud is not None
        try:
            await self.cloud.start()
        except Exception as exc:  # an unreachable cloud at boot is normal for a kiosk
            log.warning("cloud warm-up failed: %s", exc)

    async def _load_models(self) -> None:
        try:
            await asyncio.gather(self.edge.load(), self.intent.load(), self._load_knowledge())
            self.activator.refresh_fingerprint()
        finally:
            self.loaded.set()

    async def _load_knowledge(self) -> None:
        """Settings' packs, then the installed bundle's (the newer); a bad one is logged and skipped."""
        if self.knowledge is None:
            return
        current = self.store.current()
        bundled = current.artifacts.get("knowledge") if current is not None else None
        for path in [*self.settings.knowledge.paths, *([bundled] if bundled else [])]:
            try:
                await asyncio.to_thread(self.knowledge.load_path, Path(path))
            except Exception as exc:
                self.knowledge.last_error = str(exc)
                log.error("knowledge pack %s not loaded: %s", path, exc)
