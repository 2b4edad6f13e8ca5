"""The gateway's object graph: built once, in order, every part wired at construction.

``edge.assembly.build_services`` hands each part what it needs when it is built; nothing is set
on a part afterwards, and ``Services`` gains no attribute its dataclass does not declare, even
after it has started and stopped.
"""

from __future__ import annotations

import asyncio
from dataclasses import fields
from pathlib import Path

from edge.activation import BundleActivator
from edge.assembly import build_services
from edge.config import Settings
from edge.services import Services


def _settings(tmp_path: Path, **sections: object) -> Settings:
    return Settings.model_validate({
        "server": {"data_dir": str(tmp_path)},
        "cloud": {"warmup": False, "providers": [
            {"name": "acme", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-graph-test-key", "model": "m"}]},
        "knowledge": {"enabled": True},
        **sections,
    })


def test_every_part_is_wired_when_built(tmp_path: Path) -> None:
    async def scenario() -> None:
        services = build_services(_settings(tmp_path))
        try:
            pipeline = services.pipeline
            assert pipeline.edge is services.edge and pipeline.router is services.router
            assert pipeline.cloud is services.cloud is not None
            assert pipeline.cache is services.cache is not None
            assert pipeline.knowledge is services.knowledge is not None
            assert pipeline.observe == services.obs.observe_request
            assert services.knowledge.cache is services.cache
            assert services.cache.fingerprint == services.fingerprint()
            assert services.obs.sources.knowledge_status == services.knowledge.status
            assert isinstance(services.activator, BundleActivator) and services.agent is None
        finally:
            await services.aclose()

    asyncio.run(scenario())


def test_parts_turned_off_are_none(tmp_path: Path) -> None:
    async def scenario() -> None:
        services = build_services(_settings(
            tmp_path, cloud={"enabled": False}, cache={"enabled": False}, metrics={"enabled": False},
            knowledge={"enabled": False}))
        try:
            assert services.cloud is services.cache is services.obs is services.knowledge is None
            assert services.pipeline.cloud is None and services.pipeline.cache is None
            assert services.pipeline.observe is None and services.pipeline.knowledge is None
        finally:
            await services.aclose()

    asyncio.run(scenario())


def test_no_attribute_is_added_after_construction(tmp_path: Path) -> None:
    declared = {f.name for f in fields(Services)}

    async def scenario() -> None:
        services = build_services(_settings(tmp_path))
        assert set(vars(services)) == declared
        await services.start()
        await asyncio.wait_for(services.loaded.wait(), 120)
        assert set(vars(services)) == declared
        assert services.edge.ready and services.classifier is not None
        assert services.cache.fingerprint == services.fingerprint()  # refreshed once the models loaded
        await services.aclose()
        assert set(vars(services)) == declared

    asyncio.run(scenario())
