"""Backends start while the encoder decides (``Pipeline._refine_while_starting``, ``edge/early_start.py``).

Scripted backends and a staged classifier whose second stage (run in a worker thread, as the gateway
runs the encoder) waits for a ``threading.Event`` the test sets once it has seen what started early:
races are ordered by events, never by sleeps.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import pytest

from edge.config import RouterConfig
from edge.pipeline import Pipeline, Refused
from edge.records import RequestRecord
from edge.router import Router

from .scripted import ScriptedCloud, ScriptedEdge, ask, drain, settled

TEXT = "hi!! long day, my feet hurt so much, we walked everywhere. where is the restroom"


@dataclass
class Result:
    label: str
    confidence: float
    latency_ms: float = 0.1
    stage: str = "ngram"
    needs_encoder: bool = False


@dataclass
class Staged:
    """The two stages of ``models.intent.runtime.IntentClassifier``, scripted."""

    first: Result
    second: Result
    release: threading.Event = field(default_factory=threading.Event)
    second_calls: int = 0
    second_threads: list[str] = field(default_factory=list)

    def first_stage(self, text: str) -> Result:
        return self.first

    def second_stage(self, text: str, first: Result) -> Result:
        self.second_calls += 1
        self.second_threads.append(threading.current_thread().name)
        assert self.release.wait(30), "the test never released the encoder"
        return self.second

    def classify(self, text: str) -> Result:
        return self.second if self.first.needs_encoder else self.first


def staged_rig(first: Result, second: Result, edge: ScriptedEdge | None = None,
               cloud: ScriptedCloud | None = None, no_cloud: bool = False, classifier: Staged | None = None,
               **router):
    """A pipeline over scripted backends and a ``Staged`` classifier; ``router``: RouterConfig fields (hedging off
    unless asked, early_start "both" as shipped)."""
    records: list[RequestRecord] = []
    edge = edge or ScriptedEdge()
    cloud = None if no_cloud else (cloud or ScriptedCloud(texts=("From the cloud.",)))
    classifier = classifier or Staged(first, second)
    pipeline = Pipeline(Router(RouterConfig(**{"hedge": False, **router}), classifier), edge, cloud,
                        observe=records.append)
    return pipeline, classifier, edge, cloud, records


UNSURE_SIMPLE = Result("simple", 0.90, needs_encoder=True)
UNSURE_COMPLEX = Result("complex", 0.80, needs_encoder=True)
FINAL_SIMPLE = Result("simple", 0.99, latency_ms=6.0, stage="encoder")
FINAL_COMPLEX = Result("complex", 0.95, latency_ms=6.0, stage="encoder")


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await settled()


async def answer_once_started(pipeline: Pipeline, clf: Staged, *backends) -> object:
    """A streamed request whose encoder finishes only once ``backends`` are generating (first events in hand)."""
    start = asyncio.create_task(pipeline.start(ask(TEXT, stream=True)))
    for backend in backends:
        await backend.started.wait()
    await turns()
    clf.release.set()
    return await start


def test_both_backends_start_before_the_encoder_ends_and_the_agreeing_one_answers() -> None:
    async def scenario() -> None:
        pipeline, clf, edge, cloud, records = staged_rig(UNSURE_SIMPLE, FINAL_SIMPLE)
        start = asyncio.create_task(pipeline.start(ask(TEXT, stream=True)))
        await edge.started.wait()
        await cloud.started.wait()  # both are working while the encoder still waits
        assert clf.second_calls == 1 and not start.done()
        clf.release.set()
        answer = await start
        assert (answer.route, answer.reason) == ("edge", "classifier:simple:0.99")
        d = answer.decision
        assert (d.label, d.confidence, d.classifier_stage) == ("simple", 0.99, "encoder")
        assert d.rules[-1] == "early-start:edge+cloud"
        assert await drain(answer) == "Level 2, next to the pharmacy."
        await turns()
        assert (edge.calls, cloud.calls, cloud.closed) == (1, 1, 1)  # the cloud's stream was closed
        # the backend that answers was called before the encoder ended; the kiosk had its first event after
        marks = answer.timer.marks
        assert marks["route"] <= marks["encoder"] <= marks["ttft"]
        assert clf.second_threads[0] != threading.current_thread().name  # off the event loop
        (rec,) = records
        assert (rec.early_start, rec.route, rec.label, rec.confidence) == ("kept", "edge", "simple", 0.99)
        assert rec.early_dropped == "cloud"

    asyncio.run(scenario())


def test_the_device_never_answers_what_the_encoder_calls_complex() -> None:
    async def scenario() -> None:
        pipeline, clf, edge, cloud, records = staged_rig(UNSURE_SIMPLE, FINAL_COMPLEX)
        answer = await answer_once_started(pipeline, clf, edge)  # the device's first event is in hand
        assert (answer.route, answer.reason) == ("cloud", "classifier:complex:0.95")
        assert await drain(answer) == "From the cloud."
        await turns()
        assert (edge.calls, edge.closed, cloud.calls) == (1, 1, 1)  # no second cloud call: it had started
        assert records[0].early_start == "kept"

    asyncio.run(scenario())


def test_an_early_cloud_stream_with_its_first_token_is_closed_when_the_encoder_says_simple() -> None:
    async def scenario() -> None:
        pipeline, clf, edge, cloud, records = staged_rig(UNSURE_COMPLEX, FINAL_SIMPLE)
        answer = await answer_once_started(pipeline, clf, cloud)
        assert (answer.route, answer.reason) == ("edge", "classifier:simple:0.99")
        await drain(answer)
        await turns()
        assert (cloud.calls, cloud.closed, edge.calls) == (1, 1, 1)
        assert records[0].early_start == "kept"  # the device had started early too

    asyncio.run(scenario())


def test_a_complex_final_decision_with_no_cloud_is_refused_and_the_early_device_start_closed() -> None:
    async def scenario() -> None:
        pipeline, clf, edge, _, _ = staged_rig(UNSURE_SIMPLE, FINAL_COMPLEX, no_cloud=True)
        with pytest.raises(Refused):
            await answer_once_started(pipeline, clf, edge)
        await turns()
        assert (edge.calls, edge.closed) == (1, 1)

    asyncio.run(scenario())


def test_route_mode_starts_the_first_stages_route_and_a_changed_route_waits() -> None:
    async def scenario() -> None:
        pipeline, clf, edge, cloud, records = staged_rig(UNSURE_SIMPLE, FINAL_COMPLEX, early_start="route")
        start = asyncio.create_task(pipeline.start(ask(TEXT, stream=True)))
        await edge.started.wait()
        await turns()
        assert cloud.calls == 0
        clf.release.set()
        answer = await start
        assert answer.route == "cloud" and answer.decision.rules[-1] == "early-start:edge"
        await drain(answer)
        await turns()
        assert (edge.calls, edge.closed, cloud.calls) == (1, 1, 1)
        marks = answer.timer.marks
        assert marks["encoder"] <= marks["route"]  # the cloud was called after the encoder
        assert records[0].early_start == "switched"

        # a first-stage refusal (no cloud for "complex") starts nothing; the final decision answers
        pipeline, clf, edge, _, records = staged_rig(UNSURE_COMPLEX, FINAL_SIMPLE, no_cloud=True,
                                                     early_start="route")
        clf.release.set()
        answer = await pipeline.start(ask(TEXT))
        assert (answer.route, edge.calls) == ("edge", 1)
        assert not any(rule.startswith("early-start") for rule in answer.decision.rules)
        await drain(answer)
        await settled()
        assert records[0].early_start is None

    asyncio.run(scenario())


def test_off_starts_nothing_before_the_final_decision() -> None:
    async def scenario() -> None:
        pipeline, clf, edge, cloud, records = staged_rig(UNSURE_SIMPLE, FINAL_SIMPLE, early_start="off")
        start = asyncio.create_task(pipeline.start(ask(TEXT, stream=True)))
        await turns(20)
        assert (edge.calls, cloud.calls, clf.second_calls) == (0, 0, 1)
        clf.release.set()
        answer = await start
        assert answer.route == "edge" and (edge.calls, cloud.calls) == (1, 0)
        await drain(answer)
        await settled()
        assert records[0].early_start is None

    asyncio.run(scenario())


def test_a_client_gone_while_the_encoder_runs_closes_every_early_start() -> None:
    async def scenario() -> None:
        pipeline, clf, edge, cloud, _ = staged_rig(UNSURE_SIMPLE, FINAL_SIMPLE)
        start = asyncio.create_task(pipeline.start(ask(TEXT, stream=True)))
        await edge.started.wait()
        await turns()
        start.cancel()
        clf.release.set()  # the worker thread ends on its own; its result is not used
        with pytest.raises(asyncio.CancelledError):
            await start
        await turns()
        assert (edge.calls, edge.closed, cloud.calls, cloud.closed) == (1, 1, 1, 1)

    asyncio.run(scenario())


def test_a_sure_first_stage_or_a_rule_never_runs_the_encoder() -> None:
    async def scenario() -> None:
        sure = Result("simple", 0.97)
        pipeline, clf, edge, _, _ = staged_rig(sure, FINAL_COMPLEX)
        answer = await pipeline.start(ask("where is the restroom"))
        assert (answer.route, answer.reason, clf.second_calls) == ("edge", "classifier:simple:0.97", 0)
        await drain(answer)
        # a conversation goes to the cloud by rule: neither stage is asked
        pipeline, clf, edge, cloud, _ = staged_rig(UNSURE_SIMPLE, FINAL_SIMPLE)
        answer = await pipeline.start(ask("I need a taxi", "Where to?", "The airport"))
        assert (answer.route, clf.second_calls, edge.calls) == ("cloud", 0, 0)
        await drain(answer)
        # the preview (/v1/route) reports the final decision, and starts no backend
        pipeline, clf, edge, cloud, _ = staged_rig(UNSURE_SIMPLE, FINAL_COMPLEX)
        clf.release.set()
        preview = await pipeline.preview(ask(TEXT), peek_cache=False)
        assert (preview.decision.route, preview.decision.classifier_stage) == ("cloud", "encoder")
        assert (edge.calls, cloud.calls) == (0, 0)

    asyncio.run(scenario())


def test_a_failing_encoder_leaves_the_first_stages_decision() -> None:
    class Broken(Staged):
        def second_stage(self, text: str, first: Result) -> Result:
            raise RuntimeError("onnxruntime: bad allocation")

    async def scenario() -> None:
        pipeline, *_ = staged_rig(UNSURE_SIMPLE, FINAL_COMPLEX, classifier=Broken(UNSURE_SIMPLE, FINAL_COMPLEX))
        answer = await pipeline.start(ask(TEXT))
        assert (answer.route, answer.reason) == ("edge", "classifier:simple:0.90")
        assert "encoder-failed" in answer.decision.rules
        await drain(answer)
        preview = await pipeline.preview(ask(TEXT), peek_cache=False)
        assert preview.decision.route == "edge" and "encoder-failed" in preview.decision.rules

    asyncio.run(scenario())


def test_a_hedged_final_decision_races_the_two_early_starts() -> None:
    async def scenario() -> None:
        borderline = Result("simple", 0.6, latency_ms=6.0, stage="encoder")  # under the 0.8 threshold: hedged
        pipeline, clf, edge, cloud, records = staged_rig(
            UNSURE_SIMPLE, borderline, cloud=ScriptedCloud(gate=asyncio.Event()),  # the cloud never answers
            hedge=True, hedge_delay_s=0.0)
        clf.release.set()
        answer = await pipeline.start(ask(TEXT, stream=True))
        assert (answer.route, answer.reason) == ("edge", "hedge:edge-won")
        assert answer.decision.hedge and answer.decision.rules[-1] == "early-start:edge+cloud"
        await drain(answer)
        await turns()
        assert (edge.calls, cloud.calls, cloud.closed) == (1, 1, 1)  # each started once, the loser closed
        assert (records[0].early_start, records[0].hedged, records[0].early_dropped) == ("kept", True, None)

    asyncio.run(scenario())
