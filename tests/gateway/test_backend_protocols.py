"""The real backends and the cache meet the protocols the pipeline is typed against."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator

import pytest

from edge.backends import AnswerCacheStore, CloudRouteBackend, EdgeBackend, GeneratingBackend, KnowledgeSource
from edge.cache import AnswerCache
from edge.cloud_backend import CloudBackend
from edge.config import CacheConfig, CloudConfig, EdgeModelConfig, KnowledgeConfig
from edge.knowledge import KnowledgeBase
from edge.local_model import LocalModel
from edge.types import ChatRequest, Finish, TextDelta, Usage


def _members(protocol: type) -> dict[str, object]:
    out: dict[str, object] = {}
    for klass in reversed(protocol.__mro__):
        if klass in (object,) or not getattr(klass, "_is_protocol", False):
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_"):
                out[name] = value
        out.update({n: None for n in getattr(klass, "__annotations__", {}) if not n.startswith("_")})
    return out


@pytest.mark.parametrize(
    ("protocol", "implementation"),
    [(EdgeBackend, LocalModel), (CloudRouteBackend, CloudBackend), (AnswerCacheStore, AnswerCache),
     (KnowledgeSource, KnowledgeBase)],
    ids=["edge", "cloud", "cache", "knowledge"],
)
def test_the_real_classes_meet_the_protocols(protocol: type, implementation: type) -> None:
    for name, member in _members(protocol).items():
        if member is None:  # a data attribute (``config``): set in __init__, so look there
            assert f"self.{name}" in inspect.getsource(implementation.__init__), (implementation, name)
            continue
        real = inspect.getattr_static(implementation, name, None)
        assert real is not None, f"{implementation.__name__} lacks {name}"
        if isinstance(member, property):
            assert isinstance(real, property), f"{implementation.__name__}.{name} should be a property"
            continue
        wanted = list(inspect.signature(member).parameters)
        got = inspect.signature(real).parameters
        for param in wanted:
            assert param in got, f"{implementation.__name__}.{name} lacks parameter {param}"
        extra = [p for p in list(got)[len(wanted):] if got[p].default is inspect.Parameter.empty
                 and got[p].kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
        assert not extra, f"{implementation.__name__}.{name} needs more than the protocol gives: {extra}"


class ScriptedBackend:
    """A backend in a few lines: what a pipeline test scripts instead of a model."""

    def __init__(self, *texts: str) -> None:
        self.texts = texts

    async def generate(self, req: ChatRequest) -> AsyncIterator[TextDelta | Finish]:
        for text in self.texts:
            yield TextDelta(text)
        yield Finish("stop", Usage(1, len(self.texts)), {}, "scripted")


def test_a_scripted_fake_is_a_generating_backend() -> None:
    assert isinstance(ScriptedBackend("a"), GeneratingBackend)
    assert not isinstance(ScriptedBackend("a"), EdgeBackend)  # no live state: not an edge model


def test_instances_of_the_real_classes_pass_the_runtime_checks(tmp_path) -> None:
    """``isinstance`` on the runtime-checkable protocols: every member is there on a built object."""
    edge = LocalModel(EdgeModelConfig())
    assert isinstance(edge, EdgeBackend) and isinstance(edge, GeneratingBackend)
    assert (edge.ready, edge.queue_full, edge.tools_state) == (False, False, "not-loaded")  # live state, unloaded
    cloud = CloudBackend(CloudConfig())
    assert isinstance(cloud, CloudRouteBackend) and not isinstance(cloud, EdgeBackend)
    cache = AnswerCache(CacheConfig(), tmp_path)
    try:
        assert isinstance(cache, AnswerCacheStore)
    finally:
        cache.close()
    assert isinstance(KnowledgeBase(KnowledgeConfig()), KnowledgeSource)
