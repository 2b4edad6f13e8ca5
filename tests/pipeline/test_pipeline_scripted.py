"""The pipeline's fall-backs, hedging and degraded modes, driven by scripted backends.

No model and no network: each backend follows a script (``scripted.py``), the real router decides
with a fixed classifier, and races are ordered with ``asyncio.Event`` gates, never with sleeps.
"""

from __future__ import annotations

import asyncio

import pytest

from edge.app import answer_for
from edge.backends import CloudRouteBackend, EdgeBackend
from edge.errors import APIError
from edge.pipeline import Refused
from edge.router import RefusalKind
from edge.types import Finish, TextDelta

from .scripted import ScriptedCloud, ScriptedEdge, ask, busy, cloud_cut, drain, rig, settled

SIMPLE = "Where is the restroom?"
HARD = "Compare three mortgage offers and explain the tax effects."


def run(coro):
    return asyncio.run(coro)


def test_the_fakes_meet_the_protocols() -> None:
    assert isinstance(ScriptedEdge(), EdgeBackend)
    assert isinstance(ScriptedCloud(), CloudRouteBackend)


# ----- the plain paths -------------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_a_simple_question_is_answered_on_the_edge(stream: bool) -> None:
    async def scenario() -> None:
        r = rig()
        req = ask(SIMPLE, stream=stream)
        if stream:
            answer = await r.pipeline.start(req)
            text = await drain(answer)
        else:
            answer = await r.pipeline.complete(req)
            text = answer.text
        assert (answer.route, answer.reason) == ("edge", "classifier:simple:0.99")
        assert text == "Level 2, next to the pharmacy." and answer.finish is not None
        assert r.cloud.calls == 0
        await settled()
        (rec,) = r.records
        assert (rec.outcome, rec.route, rec.fallback, rec.hedged, rec.model) == ("ok", "edge", False, False,
                                                                                  "edge-model")

    run(scenario())


# ----- fall-back before the first token ------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_a_busy_edge_before_its_first_token_is_replaced_by_the_cloud(stream: bool) -> None:
    async def scenario() -> None:
        r = rig(ScriptedEdge(fail_before=busy()), ScriptedCloud(texts=("From the cloud.",)))
        req = ask(SIMPLE, stream=stream)
        answer = await (r.pipeline.start(req) if stream else r.pipeline.complete(req))
        text = await drain(answer) if stream else answer.text
        assert (answer.route, answer.reason, text) == ("cloud", "fallback:edge-edge_busy", "From the cloud.")
        assert r.edge.closed == 1  # the failed stream was closed
        await settled()
        (rec,) = r.records
        assert (rec.outcome, rec.route, rec.fallback, rec.status) == ("ok", "cloud", True, 200)

    run(scenario())


@pytest.mark.parametrize("stream", [False, True])
def test_a_cloud_failing_before_its_first_token_is_answered_degraded_by_the_edge(stream: bool) -> None:
    async def scenario() -> None:
        # Multi-turn goes to the cloud by rule, yet the edge may answer it when the cloud cannot.
        r = rig(cloud=ScriptedCloud(fail_before=cloud_cut()))
        req = ask("I need a taxi", "Where to?", "The airport", stream=stream)
        answer = await (r.pipeline.start(req) if stream else r.pipeline.complete(req))
        if stream:
            await drain(answer)
        assert (answer.route, answer.reason, answer.degraded) == (
            "edge", "fallback:cloud-cloud_bad_response", "cloud-unavailable")
        await settled()
        (rec,) = r.records
        assert (rec.outcome, rec.fallback, rec.degraded) == ("ok", True, "cloud-unavailable")

    run(scenario())


def test_a_hard_question_is_not_handed_to_the_small_model_when_the_cloud_fails() -> None:
    async def scenario() -> None:
        r = rig(cloud=ScriptedCloud(fail_before=cloud_cut()), label="complex", confidence=0.97)
        with pytest.raises(APIError) as caught:
            await r.pipeline.complete(ask(HARD))
        assert caught.value.code == "cloud_bad_response"
        assert r.edge.calls == 0
        await settled()
        (rec,) = r.records
        assert (rec.outcome, rec.status, rec.error_code) == ("error", 502, "cloud_bad_response")

    run(scenario())


def test_an_override_is_never_answered_elsewhere() -> None:
    async def scenario() -> None:
        r = rig(ScriptedEdge(fail_before=busy()))
        with pytest.raises(APIError) as caught:
            await r.pipeline.start(ask(SIMPLE, model="edgecloud-edge", stream=True))
        assert (caught.value.status, caught.value.headers) == (503, {"Retry-After": "2"})
        assert r.cloud.calls == 0

    run(scenario())


# ----- fall-back after the first token -----------------------------------------------------------
def test_a_stream_cut_after_its_first_token_ends_with_the_error() -> None:
    async def scenario() -> None:
        r = rig(ScriptedEdge(texts=("Level", " 2", " ..."), fail_after=1, error=busy()))
        answer = await r.pipeline.start(ask(SIMPLE, stream=True))
        seen: list[str] = []
        with pytest.raises(APIError) as caught:
            async for event in answer.events():
                if isinstance(event, TextDelta):
                    seen.append(event.text)
        # The kiosk already has "Level": no other backend may continue it, the stream ends with the error.
        assert seen == ["Level"] and caught.value.code == "edge_busy"
        assert r.cloud.calls == 0
        await settled()
        (rec,) = r.records
        assert (rec.outcome, rec.route, rec.fallback, rec.error_code) == ("error", "edge", False, "edge_busy")

    run(scenario())


def test_a_non_streamed_answer_cut_mid_way_is_restarted_on_the_other_backend() -> None:
    async def scenario() -> None:
        r = rig(cloud=ScriptedCloud(texts=("The", " airport", " shuttle"), fail_after=2))
        answer = await r.pipeline.complete(ask("I need a taxi", "Where to?", "The airport"))
        # Nothing reached the kiosk: the edge answers from scratch, the cloud's half answer is dropped.
        assert (answer.route, answer.reason, answer.degraded) == (
            "edge", "fallback:cloud-cloud_bad_response", "cloud-unavailable")
        assert answer.text == "Level 2, next to the pharmacy."
        assert isinstance(answer.finish, Finish) and answer.finish.model == "edge-model"
        assert r.cloud.closed == 1
        await settled()
        (rec,) = r.records  # one request, one record
        assert (rec.outcome, rec.route, rec.fallback, rec.status, rec.model) == ("ok", "edge", True, 200,
                                                                                  "edge-model")

    run(scenario())


def test_a_mid_answer_failure_without_a_fall_back_is_the_error() -> None:
    async def scenario() -> None:
        r = rig(cloud=ScriptedCloud(texts=("The", " answer"), fail_after=1), label="complex", confidence=0.97)
        with pytest.raises(APIError) as caught:
            await r.pipeline.complete(ask(HARD))
        assert caught.value.code == "cloud_bad_response" and r.edge.calls == 0
        await settled()
        (rec,) = r.records
        assert (rec.outcome, rec.route, rec.fallback, rec.status) == ("error", "cloud", False, 502)

    run(scenario())


def test_when_the_restart_fails_too_its_error_is_reported_once() -> None:
    async def scenario() -> None:
        r = rig(ScriptedEdge(fail_before=busy()), ScriptedCloud(texts=("The", " answer"), fail_after=1))
        with pytest.raises(APIError) as caught:
            await r.pipeline.complete(ask("I need a taxi", "Where to?", "The airport"))
        assert caught.value.code == "edge_busy"
        await settled()
        (rec,) = r.records
        assert (rec.outcome, rec.fallback, rec.status, rec.error_code) == ("error", True, 503, "edge_busy")

    run(scenario())


# ----- hedging -------------------------------------------------------------------------------------
def _hedged_rig(edge: ScriptedEdge, cloud: ScriptedCloud):
    # A borderline simple question goes to the cloud, hedged at once by the edge (delay 0).
    return rig(edge, cloud, confidence=0.6, hedge_delay_s=0.0)


def test_hedge_the_edge_wins_while_the_cloud_is_slow_and_the_cloud_is_cancelled() -> None:
    async def scenario() -> None:
        cloud = ScriptedCloud(gate=asyncio.Event())  # never opened: the cloud has no first token
        r = _hedged_rig(ScriptedEdge(), cloud)
        answer = await r.pipeline.start(ask("can u help me", stream=True))
        assert (answer.route, answer.reason) == ("edge", "hedge:edge-won")
        assert (cloud.calls, cloud.closed) == (1, 1)  # started, then cancelled and closed
        await drain(answer)
        await settled()
        (rec,) = r.records
        assert (rec.hedged, rec.fallback, rec.route) == (True, False, "edge")

    run(scenario())


def test_hedge_the_cloud_wins_the_race_and_the_edge_is_cancelled() -> None:
    async def scenario() -> None:
        edge = ScriptedEdge(gate=asyncio.Event())  # never opened
        cloud = ScriptedCloud(gate=asyncio.Event(), texts=("From the cloud.",))
        r = _hedged_rig(edge, cloud)
        task = asyncio.create_task(r.pipeline.complete(ask("can u help me")))
        await edge.started.wait()  # both are running now
        cloud.gate.set()
        answer = await task
        assert (answer.route, answer.reason, answer.text) == ("cloud", "hedge:cloud-won", "From the cloud.")
        assert (edge.calls, edge.closed) == (1, 1)
        await settled()
        (rec,) = r.records
        assert (rec.hedged, rec.route) == (True, "cloud")

    run(scenario())


def test_hedge_a_fast_cloud_never_starts_the_edge() -> None:
    async def scenario() -> None:
        r = rig(confidence=0.6, hedge_delay_s=30.0)  # the cloud answers well within the delay
        answer = await r.pipeline.complete(ask("can u help me"))
        assert answer.route == "cloud" and answer.reason.endswith(":low-confidence")
        assert r.edge.calls == 0
        await settled()
        assert r.records[0].hedged is False

    run(scenario())


def test_hedge_a_cloud_failing_first_leaves_the_answer_to_the_edge() -> None:
    async def scenario() -> None:
        r = _hedged_rig(ScriptedEdge(), ScriptedCloud(fail_before=cloud_cut()))
        answer = await r.pipeline.complete(ask("can u help me"))
        assert (answer.route, answer.reason, answer.degraded) == (
            "edge", "fallback:cloud-cloud_bad_response", "cloud-unavailable")
        await settled()
        (rec,) = r.records
        assert (rec.fallback, rec.degraded) == (True, "cloud-unavailable")

    run(scenario())


def test_hedge_both_failing_reports_the_clouds_error() -> None:
    async def scenario() -> None:
        r = _hedged_rig(ScriptedEdge(fail_before=busy()), ScriptedCloud(gate=asyncio.Event(),
                                                                         fail_before=cloud_cut()))
        task = asyncio.create_task(r.pipeline.start(ask("can u help me", stream=True)))
        await r.edge.started.wait()
        r.cloud.gate.set()
        with pytest.raises(APIError) as caught:
            await task
        assert caught.value.code == "cloud_bad_response"  # the route the policy chose

    run(scenario())


# ----- edge busy -------------------------------------------------------------------------------------
def test_a_full_edge_queue_sends_the_request_to_the_cloud() -> None:
    async def scenario() -> None:
        r = rig(ScriptedEdge(queue_full=True))
        answer = await r.pipeline.complete(ask(SIMPLE))
        assert (answer.route, answer.reason) == ("cloud", "edge-busy")
        assert r.edge.calls == 0

    run(scenario())


def test_a_busy_edge_with_no_cloud_is_a_503_with_retry_after() -> None:
    async def scenario() -> None:
        r = rig(ScriptedEdge(queue_full=True, fail_before=busy()), no_cloud=True)
        with pytest.raises(APIError) as caught:
            await r.pipeline.complete(ask(SIMPLE))
        assert (caught.value.status, caught.value.code, caught.value.headers) == (
            503, "edge_busy", {"Retry-After": "2"})
        await settled()
        (rec,) = r.records
        assert (rec.outcome, rec.status, rec.error_code) == ("error", 503, "edge_busy")

    run(scenario())


# ----- degraded mode: the cloud down (breaker open) or not configured ----------------------------
@pytest.mark.parametrize("cloud_state", ["breaker-open", "not-configured"])
def test_cloud_down_a_simple_question_is_answered_degraded_on_the_edge(cloud_state: str) -> None:
    async def scenario() -> None:
        if cloud_state == "breaker-open":
            r = rig(cloud=ScriptedCloud(up=False), confidence=0.6)
        else:
            r = rig(no_cloud=True, confidence=0.6)
        answer = await r.pipeline.complete(ask("can u help me"))
        assert (answer.route, answer.degraded) == ("edge", "cloud-unavailable")
        assert answer.reason.endswith(":degraded")
        if r.cloud is not None:
            assert r.cloud.calls == 0

    run(scenario())


def test_cloud_down_a_hard_question_is_refused_with_its_reason() -> None:
    async def scenario() -> None:
        r = rig(cloud=ScriptedCloud(up=False), label="complex", confidence=0.97)
        with pytest.raises(Refused) as caught:
            await r.pipeline.complete(ask(HARD))
        assert caught.value.refusal.kind is RefusalKind.CLOUD_UNAVAILABLE
        assert "needs the cloud" in caught.value.refusal.message
        assert r.edge.calls == 0 and r.cloud.calls == 0
        # The HTTP layer gives the refusal its status and counts the request once.
        with pytest.raises(APIError) as http:
            await answer_for(r.pipeline, ask(HARD))
        assert (http.value.status, http.value.code, http.value.type) == (503, "cloud_unavailable", "server_error")
        await settled()
        (rec,) = r.records
        assert (rec.outcome, rec.status, rec.error_code, rec.label) == ("error", 503, "cloud_unavailable", "complex")

    run(scenario())


def test_no_backend_at_all_is_refused() -> None:
    async def scenario() -> None:
        r = rig(ScriptedEdge(ready=False), no_cloud=True)
        with pytest.raises(Refused) as caught:
            await r.pipeline.start(ask(SIMPLE, stream=True))
        assert caught.value.refusal.kind is RefusalKind.NO_BACKEND

    run(scenario())


def test_a_client_gone_mid_answer_closes_the_backend_and_records_a_cancel() -> None:
    async def scenario() -> None:
        edge = ScriptedEdge(texts=("one", "two"))
        r = rig(edge)
        answer = await r.pipeline.start(ask(SIMPLE, stream=True))
        events = answer.events()
        assert isinstance(await events.__anext__(), TextDelta)
        await events.aclose()  # what Starlette does when the kiosk disconnects
        assert edge.closed == 1
        await settled()
        (rec,) = r.records
        assert rec.outcome == "cancelled"

    run(scenario())


def test_a_client_gone_during_a_non_streamed_answer_closes_the_backend_once() -> None:
    async def scenario() -> None:
        edge = ScriptedEdge(texts=("one", "two"), stall_after=1)
        r = rig(edge)
        task = asyncio.create_task(r.pipeline.complete(ask(SIMPLE)))
        await edge.stalled.wait()  # mid-answer
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (edge.closed, r.cloud.calls) == (1, 0)  # stopped, not restarted elsewhere
        await settled()
        (rec,) = r.records
        assert (rec.outcome, rec.status) == ("cancelled", 200)

    run(scenario())
