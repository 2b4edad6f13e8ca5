"""The gateway's parts, built and torn down in the app's lifespan.

Everything with state (the loaded model, the cloud connection pools, the cache, the metrics
registry, the update agent) lives on one ``Services`` object per app, never in module globals, so
tests can run several gateways in one process and a hot swap replaces parts in one place.
``Services`` is also the update agent's ``Activator``: it knows how to swap in a new bundle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from .config import Settings
from .local_model import LocalModel
from .pipeline import Pipeline
from .router import Router
from .types import ChatRequest, Finish, Message

log = logging.getLogger("edgecloud.services")


class Services:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.data_dir = Path(settings.server.data_dir)
        self.edge = LocalModel.for_device(settings.edge, self.data_dir)
        self.router = Router(settings.router)
        self.cloud: Any | None = None
        self.cache: Any | None = None
        self.obs: Any | None = None
        self.agent: Any | None = None
        self.store: Any | None = None
        self.classifier: Any | None = None
        self.classifier_error: str | None = None
        self.knowledge: Any | None = None
        self.pipeline = Pipeline(self.router, self.edge, log_prompts=settings.logging.log_prompts)
        self._tasks: list[asyncio.Task[Any]] = []
        self.loaded = asyncio.Event()

    # ----- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        settings = self.settings
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._init_store()
        self._init_observability()
        if settings.cache.enabled:
            self._init_cache()
        if settings.cloud.enabled:
            from .cloud_backend import CloudBackend

            on_call = self.obs.observe_cloud_call if self.obs is not None else None
            self.cloud = CloudBackend(settings.cloud, on_call=on_call, deadline_s=settings.server.request_deadline_s)
            self._tasks.append(asyncio.create_task(self._start_cloud()))
        self.pipeline.cloud = self.cloud
        self.pipeline.cache = self.cache
        if settings.knowledge.enabled:
            self._init_knowledge()
            if self.obs is not None:
                self.obs.sources.knowledge_status = self.knowledge.status
        if self.obs is not None:
            self.pipeline.observe = self.obs.observe_request
            self.obs.bind_state(
                queue_depth=lambda: self.edge.queue_depth,
                model_loaded=lambda: self.edge.ready,
                breaker_states=lambda: self.cloud.bridge.breaker_states() if self.cloud else {},
                update_status=lambda: self.agent.status() if self.agent is not None else {},
                installed_version=self._installed_version,
                edge_slots=lambda: (self.edge.busy_slots, self.edge.slots),
                edge_batches=self.edge.batch_counts,
            )
            await self.obs.start()
        self._tasks.append(asyncio.create_task(self._load_models()))
        if settings.fleet.enabled:
            self._init_agent()

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

    # ----- parts -------------------------------------------------------------------------------
    def _init_store(self) -> None:
        """The update store (recovered by ``LocalModel.for_device``); its bundle's classifier."""
        from models.store import ModelStore

        store = ModelStore(self.data_dir)
        self.store = store
        try:
            current = store.current()
        except Exception as exc:
            log.error("model store unreadable: %s", exc)
            return
        if current is None:
            return
        intent = current.artifacts.get("intent")
        if intent and self.settings.router.intent_model_dir is None:
            self._bundle_intent_dir = Path(intent).parent

    def _init_observability(self) -> None:
        if not self.settings.metrics.enabled:
            return
        from .observability import Observability

        self.obs = Observability(self.settings)

    def _init_cache(self) -> None:
        from .cache import AnswerCache

        self.cache = AnswerCache(self.settings.cache, self.data_dir)
        self.cache.set_fingerprint(self.fingerprint())
        for path in self.settings.cache.faq_paths:
            try:
                self.cache.load_faq(Path(path))
            except Exception as exc:
                log.error("FAQ pack %s not loaded: %s", path, exc)
        current = self.store.current() if self.store is not None else None
        if current is not None and current.artifacts.get("faq"):
            try:
                self.cache.load_faq(current.artifacts["faq"])
            except Exception as exc:
                log.error("the installed bundle's FAQ pack was not loaded: %s", exc)

    def _init_knowledge(self) -> None:
        """Venue knowledge (edge/knowledge); its packs are indexed in ``_load_models``, off the loop."""
        from .knowledge import KnowledgeBase

        registry = self.obs.registry if self.obs is not None else None
        self.knowledge = KnowledgeBase(self.settings.knowledge, self.cache, self.settings.cache.knowledge_version,
                                       registry)
        self.pipeline.knowledge = self.knowledge

    async def _load_knowledge(self) -> None:
        """Settings' packs, then the installed bundle's (the newer); a bad one is logged and skipped."""
        if self.knowledge is None:
            return
        current = self.store.current() if self.store is not None else None
        bundled = current.artifacts.get("knowledge") if current is not None else None
        for path in [*self.settings.knowledge.paths, *([bundled] if bundled else [])]:
            try:
                await asyncio.to_thread(self.knowledge.load_path, Path(path))
            except Exception as exc:
                self.knowledge.last_error = str(exc)
                log.error("knowledge pack %s not loaded: %s", path, exc)

    def _init_agent(self) -> None:
        fleet = self.settings.fleet
        from models.fleet.agent import UpdateAgent
        from models.fleet.transport import DownloadLimits

        self.agent = UpdateAgent(
            data_dir=self.data_dir,
            repository_url=fleet.repository_url,
            trusted_root=Path(fleet.trusted_root) if fleet.trusted_root else self.data_dir / "root.json",
            hardware=fleet.hardware,
            channel=fleet.channel,
            activator=self,
            check_interval_s=fleet.check_interval_s,
            check_jitter_s=fleet.check_jitter_s,
            metrics_registry=self.obs.registry if self.obs is not None else None,
            download_limits=DownloadLimits(deadline_s=fleet.download_deadline_s,
                                           min_rate_bps=fleet.download_min_rate_bps),
        )
        self._tasks.append(asyncio.create_task(self.agent.run_forever()))

    async def _start_cloud(self) -> None:
        try:
            await self.cloud.start()
        except Exception as exc:  # an unreachable cloud at boot is normal for a kiosk
            log.warning("cloud warm-up failed: %s", exc)

    async def _load_models(self) -> None:
        try:
            await asyncio.gather(self.edge.load(), self._load_classifier(), self._load_knowledge())
            if self.cache is not None:
                self.cache.set_fingerprint(self.fingerprint())
        finally:
            self.loaded.set()

    async def _load_classifier(self, model_dir: Path | None = None) -> None:
        model_dir = model_dir or self.settings.router.intent_model_dir or getattr(self, "_bundle_intent_dir", None)
        try:
            from models.intent.runtime import IntentClassifier

            classifier = await asyncio.get_running_loop().run_in_executor(None, IntentClassifier.load, model_dir)
        except Exception as exc:
            self.classifier_error = f"{type(exc).__name__}: {exc}"
            log.error("intent classifier not loaded: %s", self.classifier_error)
            return
        self.classifier = classifier
        self.router.set_classifier(classifier)

    def fingerprint(self) -> str:
        edge = self.edge.model.version if self.edge.model else str(self.edge.model_path)
        cloud = ",".join(f"{p.name}:{p.model}" for p in self.settings.cloud.providers)
        intent = getattr(self.classifier, "version", "") if self.classifier else ""
        return f"edge={edge};cloud={cloud};intent={intent}"

    def _installed_version(self) -> str | None:
        current = self.store.current() if self.store is not None else None
        if current is not None:
            return str(current.version)
        return self.edge.model.version if self.edge.model is not None else None

    # ----- Activator (the update agent calls these) -----------------------------------------------
    async def activate(self, version: Any) -> None:
        """Hot-swap a bundle: new requests use it once loaded; streams in progress finish on the old."""
        artifacts = version.artifacts
        if artifacts.get("gguf"):
            await self.edge.swap(Path(artifacts["gguf"]), f"bundle-{version.version}")
        if artifacts.get("intent"):
            await self._load_classifier(Path(artifacts["intent"]).parent)
        if artifacts.get("faq") and self.cache is not None:
            self.cache.load_faq(Path(artifacts["faq"]))
        if artifacts.get("knowledge") and self.knowledge is not None:
            await asyncio.to_thread(self.knowledge.load_path, Path(artifacts["knowledge"]))
        if self.cache is not None:
            self.cache.set_fingerprint(self.fingerprint())

    async def health_check(self) -> bool:
        """The swapped-in model answers one token."""
        if not self.edge.ready:
            return False
        req = ChatRequest(messages=[Message("user", "Hello")], max_tokens=1, temperature=0.0,
                          request_id="health-check")
        try:
            async for event in self.edge.generate(req):
                if isinstance(event, Finish):
                    return True
        except Exception as exc:
            log.error("post-activation health check failed: %s", exc)
        return False

    # ----- routes of the feature modules ----------------------------------------------------------
    @staticmethod
    def mount_feature_routes(app: FastAPI, require_admin: Any) -> None:
        def services() -> Services:
            return app.state.services

        from .cache import cache_admin_router
        from .knowledge.admin import knowledge_admin_router
        from .observability import observability_router
        from .update_routes import update_router

        app.include_router(cache_admin_router(lambda: services().cache, require_admin))
        app.include_router(knowledge_admin_router(lambda: services().knowledge, require_admin))
        app.include_router(observability_router(lambda: services().obs))
        app.include_router(update_router(lambda: services().agent, require_admin))
