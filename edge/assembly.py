"""Building one gateway's object graph from its settings, once and in order.

Each part is built by one function from the parts before it, so the order is the data flow:
the edge model (which finishes or undoes an interrupted update first) -> the update store ->
observability (its registry and call hooks are wanted by the rest) -> the answer cache (and its
FAQ packs) -> the cloud -> venue knowledge -> the router and its classifier slot -> the pipeline
-> the bundle activator -> the update agent. Nothing is patched in afterwards; the only late
binding is observability's scrape-time readers, which read live state through the finished
``Services`` (a reader cannot exist before what it reads).

Parts that are turned off are None; optional dependencies (the cloud bridge, the fleet's crypto)
are imported only when their part is on.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from .activation import BundleActivator, IntentSlot, answer_fingerprint
from .config import Settings
from .local_model import LocalModel
from .pipeline import Pipeline
from .router import Router
from .services import Services

if TYPE_CHECKING:
    from models.fleet.agent import UpdateAgent
    from models.store import InstalledVersion, ModelStore

    from .cache import AnswerCache
    from .cloud_backend import CloudBackend
    from .knowledge import KnowledgeBase
    from .observability import Observability

log = logging.getLogger("edgecloud.services")


def build_services(settings: Settings) -> Services:
    """Every part of one gateway, wired; ``Services.start`` then sets them going."""
    data_dir = Path(settings.server.data_dir)
    edge = LocalModel.for_device(settings.edge, data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    store = _model_store(data_dir)
    obs = _observability(settings)
    cache = _answer_cache(settings, data_dir, store, answer_fingerprint(edge, settings, None))
    cloud = _cloud(settings, obs)
    knowledge = _knowledge(settings, cache, obs)
    router = Router(settings.router)
    intent = IntentSlot(router, settings.router.intent_model_dir or _bundle_intent_dir(store),
                        encoder=settings.router.intent_encoder)
    pipeline = Pipeline(
        router,
        edge,
        cloud=cloud,
        cache=cache,
        observe=obs.observe_request if obs is not None else None,
        log_prompts=settings.logging.log_prompts,
        knowledge=knowledge,
    )
    activator = BundleActivator(settings, edge, intent, cache, knowledge)
    agent = _update_agent(settings, data_dir, activator, obs)
    services = Services(
        settings=settings, data_dir=data_dir, store=store, obs=obs, cache=cache, cloud=cloud,
        knowledge=knowledge, edge=edge, router=router, intent=intent, pipeline=pipeline,
        activator=activator, agent=agent,
    )
    if obs is not None:
        _bind_gauges(obs, services)
    return services


def _model_store(data_dir: Path) -> ModelStore:
    """The update store (already recovered by ``LocalModel.for_device``)."""
    from models.store import ModelStore

    return ModelStore(data_dir)


def _installed(store: ModelStore) -> InstalledVersion | None:
    """The installed bundle; None (logged) when the store cannot be read: the kiosk still starts."""
    try:
        return store.current()
    except Exception as exc:
        log.error("model store unreadable: %s", exc)
        return None


def _bundle_intent_dir(store: ModelStore) -> Path | None:
    """The installed bundle's classifier directory, when it ships one."""
    current = _installed(store)
    intent = current.artifacts.get("intent") if current is not None else None
    return Path(intent).parent if intent else None


def _observability(settings: Settings) -> Observability | None:
    if not settings.metrics.enabled:
        return None
    from .observability import Observability

    return Observability(settings)


def _answer_cache(settings: Settings, data_dir: Path, store: ModelStore, fingerprint: str) -> AnswerCache | None:
    """The cache with the settings' FAQ packs, then the installed bundle's; a bad pack is logged."""
    if not settings.cache.enabled:
        return None
    from .cache import AnswerCache

    cache = AnswerCache(settings.cache, data_dir)
    cache.set_fingerprint(fingerprint)
    for path in settings.cache.faq_paths:
        try:
            cache.load_faq(Path(path))
        except Exception as exc:
            log.error("FAQ pack %s not loaded: %s", path, exc)
    current = _installed(store)
    if current is not None and current.artifacts.get("faq"):
        try:
            cache.load_faq(current.artifacts["faq"])
        except Exception as exc:
            log.error("the installed bundle's FAQ pack was not loaded: %s", exc)
    return cache


def _cloud(settings: Settings, obs: Observability | None) -> CloudBackend | None:
    if not settings.cloud.enabled:
        return None
    from .cloud_backend import CloudBackend

    on_call = obs.observe_cloud_call if obs is not None else None
    return CloudBackend(settings.cloud, on_call=on_call, deadline_s=settings.server.request_deadline_s)


def _knowledge(settings: Settings, cache: AnswerCache | None, obs: Observability | None) -> KnowledgeBase | None:
    """Venue knowledge; its packs are indexed in ``Services.start``, off the loop."""
    if not settings.knowledge.enabled:
        return None
    from .knowledge import KnowledgeBase

    registry = obs.registry if obs is not None else None
    return KnowledgeBase(settings.knowledge, cache, settings.cache.knowledge_version, registry)


def _update_agent(
    settings: Settings, data_dir: Path, activator: BundleActivator, obs: Observability | None
) -> UpdateAgent | None:
    fleet = settings.fleet
    if not fleet.enabled:
        return None
    from models.fleet.agent import UpdateAgent
    from models.fleet.transport import DownloadLimits

    return UpdateAgent(
        data_dir=data_dir,
        repository_url=fleet.repository_url,
        trusted_root=Path(fleet.trusted_root) if fleet.trusted_root else data_dir / "root.json",
        hardware=fleet.hardware,
        channel=fleet.channel,
        activator=activator,
        check_interval_s=fleet.check_interval_s,
        check_jitter_s=fleet.check_jitter_s,
        metrics_registry=obs.registry if obs is not None else None,
        download_limits=DownloadLimits(deadline_s=fleet.download_deadline_s,
                                       min_rate_bps=fleet.download_min_rate_bps),
    )


def _bind_gauges(obs: Observability, services: Services) -> None:
    """The live state the gauges and the dashboard read at scrape time."""
    edge = services.edge
    obs.bind_state(
        queue_depth=lambda: edge.queue_depth,
        model_loaded=lambda: edge.ready,
        breaker_states=lambda: services.cloud.bridge.breaker_states() if services.cloud else {},
        update_status=lambda: services.agent.status() if services.agent is not None else {},
        installed_version=services.installed_version,
        edge_slots=lambda: (edge.busy_slots, edge.slots),
        edge_batches=edge.batch_counts,
        knowledge_status=services.knowledge.status if services.knowledge is not None else None,
    )
