"""One request's way through the gateway: cache -> policy -> backend(s) -> answer.

``Pipeline.start`` returns only once the answer's first event exists (or raises an ``APIError``
before anything was sent). That is deliberate: the HTTP status and the route headers of a stream
are then true (a full edge queue is a real 503, a hedge's winner is in ``x-edgecloud-route``),
and a backend that fails before its first token can be replaced by the other one without the
kiosk ever seeing the failure. After the first token, a failure ends the stream with an error event.

No web framework here: the app turns an ``Answer`` into JSON or SSE.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from .backends import AnswerCacheStore, CloudRouteBackend, EdgeBackend, GeneratingBackend
from .constrained import ConstrainedEdge, prepare
from .errors import APIError, internal
from .records import RequestRecord
from .router import Decision, LiveState, Router
from .schemas import reject_for_edge
from .tools import edge_tools_state
from .types import ChatRequest, Finish, TextDelta, Timer, ToolCallDelta, Usage

log = logging.getLogger("edgecloud.pipeline")

Events = AsyncIterator[TextDelta | ToolCallDelta | Finish]


@dataclass
class Answer:
    """A started answer: its first event is in hand, the rest is ``events``."""

    request: ChatRequest
    route: str
    reason: str
    model: str
    timer: Timer
    record: RequestRecord
    first: TextDelta | Finish
    rest: Events
    degraded: str | None = None
    cache: str | None = None
    decision: Decision | None = None
    backend_request: ChatRequest | None = None  # what the backend saw (grounded); ``request`` keys the cache
    _done: Callable[[Answer, str, Finish | None, APIError | None], None] | None = None
    _text: list[str] = field(default_factory=list)
    tool_calls: list[ToolCallDelta] = field(default_factory=list)
    _finished: bool = False

    async def events(self) -> Events:
        """Every event of the answer, first included; records the outcome when it ends."""
        finish: Finish | None = None
        error: APIError | None = None
        outcome = "cancelled"
        try:
            event = self.first
            while True:
                if isinstance(event, TextDelta):
                    self._text.append(event.text)
                    yield event
                elif isinstance(event, ToolCallDelta):
                    self.tool_calls.append(event)
                    yield event
                else:
                    finish = event
                    outcome = "ok"
                    yield event
                    return
                event = await self.rest.__anext__()
        except StopAsyncIteration:
            outcome = "error"
            error = internal("The backend ended the answer without finishing it.")
            raise error from None
        except APIError as exc:
            outcome, error = "error", exc
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception as exc:
            outcome, error = "error", internal(f"The backend failed mid-answer: {type(exc).__name__}")
            log.exception("backend failed mid-answer")
            raise error from exc
        finally:
            with contextlib.suppress(Exception):
                await self.rest.aclose()
            if not self._finished and self._done is not None:
                self._finished = True
                self._done(self, outcome, finish, error)

    @property
    def text(self) -> str:
        return "".join(self._text)


class Pipeline:
    """Holds the parts (set in the app's lifespan) and runs requests through them.

    The parts are typed by the protocols in ``edge.backends``: any edge model, cloud client or cache
    that meets them can stand in (the tests script fakes that way).
    """

    def __init__(
        self,
        router: Router,
        edge: EdgeBackend,
        cloud: CloudRouteBackend | None = None,
        cache: AnswerCacheStore | None = None,
        observe: Callable[[RequestRecord], None] | None = None,
        log_prompts: bool = False,
        knowledge: Any | None = None,  # edge.knowledge.KnowledgeBase, when venue knowledge is on
    ) -> None:
        self.router = router
        self.edge = edge
        self.cloud = cloud
        self.cache = cache
        self.observe = observe
        self.log_prompts = log_prompts
        self.knowledge = knowledge

    # ----- state ------------------------------------------------------------------------------
    def live_state(self) -> LiveState:
        edge, cloud = self.edge, self.cloud
        return LiveState(
            edge_ready=edge.ready,
            edge_expected_ttft_s=edge.expected_ttft_s() if edge.ready else 0.0,
            edge_queue_full=edge.queue_full,
            edge_n_ctx=edge.n_ctx,
            edge_tools=edge_tools_state(edge),
            cloud_enabled=bool(cloud and cloud.enabled),
            cloud_available=bool(cloud and cloud.enabled and cloud.available()),
            cloud_ttft_p95_s=cloud.ttft_p95_s() if cloud and cloud.enabled else None,
        )

    def decide(self, req: ChatRequest, evidence: Any = None) -> Decision:
        if evidence is None and self.knowledge is not None:
            evidence = self.knowledge.evidence(req.last_user_message)
        live = self.live_state()
        prepare(req, live.edge_tools)  # a tool request the device may answer gets its grammar
        return self.router.decide(req, live, self.edge.count_prompt_tokens(req), evidence=evidence)

    async def evidence(self, req: ChatRequest) -> Any:
        """Venue evidence for the request: BM25 is sub-millisecond and runs here; the optional dense
        vectors run an embedding model (tens of ms), so then it runs in a worker thread."""
        knowledge = self.knowledge
        if knowledge is None:
            return None
        if knowledge.config.dense:
            return await asyncio.to_thread(knowledge.evidence, req.last_user_message)
        return knowledge.evidence(req.last_user_message)

    def new_record(self, req: ChatRequest) -> RequestRecord:
        return RequestRecord(
            request_id=req.request_id,
            started_at=time.time() - (time.perf_counter() - req.received_at),
            stream=req.stream,
            requested_model=req.model,
            prompt=req.last_user_message if self.log_prompts else None,
        )

    def count_rejected(self, request_id: str, exc: APIError) -> None:
        """A request refused before it could be routed (bad body, unknown model, too large)."""
        self._emit(RequestRecord(request_id=request_id, started_at=time.time(), outcome="rejected",
                                 status=exc.status, error_code=exc.code))

    # ----- the request path ---------------------------------------------------------------------
    async def start(self, req: ChatRequest) -> Answer:
        timer = Timer(start=req.received_at)
        record = self.new_record(req)
        try:
            return await self._start(req, timer, record)
        except APIError as exc:
            record.outcome = "rejected" if exc.status < 500 else "error"
            record.status, record.error_code = exc.status, exc.code
            record.total_ms = timer.elapsed_ms()
            self._emit(record)
            raise

    async def _start(self, req: ChatRequest, timer: Timer, record: RequestRecord) -> Answer:
        cache, policy = self.cache, None
        if cache is not None:
            policy = cache.policy(req)
            if policy.read:
                # Semantic matching runs an embedding model (tens of ms): keep it off the loop.
                if cache.semantic_enabled:
                    hit = await asyncio.to_thread(cache.lookup, req, policy)
                else:
                    hit = cache.lookup(req, policy)
                if hit is not None:
                    timer.mark("cache")
                    return self._cache_answer(req, timer, record, hit)
            record.cache = "miss" if policy.read else "bypass"

        decision = self.decide(req, await self.evidence(req))
        timer.mark("route")
        record.scenario, record.label, record.confidence = decision.scenario, decision.label, decision.confidence
        if decision.error is not None:
            record.reason = decision.reason
            raise decision.error
        if decision.knowledge_refusal:
            return self._knowledge_answer(req, timer, record, decision)
        if decision.route == "edge":
            reject_for_edge(req, edge_tools_state(self.edge))
        backend_req = self._grounded(req, decision)
        route, reason, first, rest, hedged, fallback = await self._run(backend_req, decision, timer)
        record.hedged, record.fallback = hedged, fallback
        if backend_req is not req and not reason.startswith("knowledge:"):
            reason = f"{reason};{decision.knowledge.rule}"
        answer = Answer(
            request=req, route=route, reason=reason, model="", timer=timer, record=record,
            first=first, rest=rest, degraded=decision.degraded if route == "edge" else None,
            cache=record.cache, decision=decision, backend_request=backend_req,
        )
        answer._done = lambda a, outcome, finish, error: self._finish(a, outcome, finish, error, policy)
        return answer

    def _cache_answer(self, req: ChatRequest, timer: Timer, record: RequestRecord, hit: Any) -> Answer:
        from .cache import replay_chunks

        chunks = replay_chunks(hit.text) if req.stream else [hit.text]
        usage = hit.usage if isinstance(hit.usage, Usage) else Usage()

        async def replay() -> Events:
            for chunk in chunks[1:]:
                yield TextDelta(chunk)
            yield Finish(hit.finish_reason, usage, {}, hit.model)

        first: TextDelta | Finish = TextDelta(chunks[0]) if chunks and chunks[0] else Finish(
            hit.finish_reason, usage, {}, hit.model)
        rest = replay()
        record.cache = "hit"
        reason = "faq" if hit.reason == "faq" else f"cache:{hit.reason}"
        answer = Answer(
            request=req, route="cache", reason=reason, model=hit.model, timer=timer, record=record,
            first=first, rest=rest, cache="hit",
        )
        answer._done = lambda a, outcome, finish, error: self._finish(a, outcome, finish, error, None)
        return answer

    def _grounded(self, req: ChatRequest, d: Decision) -> ChatRequest:
        """The request with the venue facts in its system prompt (edge/knowledge), or ``req``."""
        if d.knowledge is None or self.knowledge is None:
            return req
        from .knowledge.grounding import ground

        return ground(req, d.knowledge, self.knowledge.config.max_prompt_tokens)

    def _knowledge_answer(self, req: ChatRequest, timer: Timer, record: RequestRecord, d: Decision) -> Answer:
        """Strict mode, a venue question, no evidence: the operator's "ask staff" text, on the device."""
        from .cache import replay_chunks

        text = d.knowledge.refusal
        chunks = replay_chunks(text) if req.stream else [text]
        model = "edgecloud-knowledge"

        async def replay() -> Events:
            for chunk in chunks[1:]:
                yield TextDelta(chunk)
            yield Finish("stop", Usage(), {}, model)

        timer.mark("ttft")
        answer = Answer(
            request=req, route="edge", reason=d.reason, model=model, timer=timer, record=record,
            first=TextDelta(chunks[0]), rest=replay(), cache=record.cache, decision=d,
        )
        answer._done = lambda a, outcome, finish, error: self._finish(a, outcome, finish, error, None)
        return answer

    async def _run(
        self, req: ChatRequest, d: Decision, timer: Timer
    ) -> tuple[str, str, TextDelta | Finish, Events, bool, bool]:
        """Start the chosen backend (hedged or with fall-back); return its first event."""
        primary = d.route
        other = "cloud" if primary == "edge" else "edge"
        if d.hedge and primary == "cloud" and d.edge_ok:
            return await self._hedged(req, d, timer)
        try:
            first, rest = await self._first(self._backend(primary), req)
            timer.mark("ttft")
            return primary, d.reason, first, rest, False, False
        except APIError as exc:
            if not self._may_fall_back(d, other, exc):
                raise
            log.info("fall-back %s -> %s: %s", primary, other, exc.message)
            if other == "edge":
                reject_for_edge(req, edge_tools_state(self.edge))
            first, rest = await self._first(self._backend(other), req)
            timer.mark("ttft")
            why = exc.code or "error"
            if other == "edge":
                d.degraded = d.degraded or "cloud-unavailable"
            return other, f"fallback:{primary}-{why}", first, rest, False, True

    async def restart_elsewhere(self, answer: Answer, exc: APIError) -> Answer | None:
        """A non-streaming answer failed mid-way: nothing reached the kiosk yet, so the other
        backend may answer it from scratch when the policy allows. None if it may not."""
        d = answer.decision
        if d is None or answer.route not in ("edge", "cloud"):
            return None
        other = "cloud" if answer.route == "edge" else "edge"
        if not self._may_fall_back(d, other, exc):
            return None
        req = answer.request
        if other == "edge":
            reject_for_edge(req, edge_tools_state(self.edge))
        first, rest = await self._first(self._backend(other), answer.backend_request or req)
        record = self.new_record(req)
        record.scenario, record.label, record.confidence = d.scenario, d.label, d.confidence
        record.fallback = True
        timer = answer.timer
        timer.mark("ttft")
        retry = Answer(
            request=req, route=other, reason=f"fallback:{answer.route}-{exc.code or 'error'}", model="",
            timer=timer, record=record, first=first, rest=rest,
            degraded="cloud-unavailable" if other == "edge" else None, cache=answer.cache, decision=d,
            backend_request=answer.backend_request,
        )
        retry._done = lambda a, outcome, finish, error: self._finish(a, outcome, finish, error, None)
        return retry

    def _may_fall_back(self, d: Decision, other: str, exc: APIError) -> bool:
        if exc.status < 500 and exc.code not in ("context_length_exceeded", "rate_limit_exceeded"):
            return False
        if d.override:
            return False
        if other == "edge":
            return d.edge_ok and self.edge.ready
        return bool(d.cloud_ok and self.cloud and self.cloud.enabled and self.cloud.available())

    def _backend(self, name: str) -> GeneratingBackend:
        if name == "edge":
            return ConstrainedEdge(self.edge)  # requests without a grammar go straight to the model
        if self.cloud is None or not self.cloud.enabled:
            raise APIError(503, "No cloud provider is configured on this gateway.", "server_error", None,
                           "cloud_unconfigured")
        return self.cloud

    @staticmethod
    async def _first(backend: GeneratingBackend, req: ChatRequest) -> tuple[TextDelta | Finish, Events]:
        gen = backend.generate(req)
        try:
            first = await gen.__anext__()
        except StopAsyncIteration:
            raise internal("The backend returned no answer.") from None
        except BaseException:
            with contextlib.suppress(Exception):
                await gen.aclose()
            raise
        return first, gen

    async def _hedged(
        self, req: ChatRequest, d: Decision, timer: Timer
    ) -> tuple[str, str, TextDelta | Finish, Events, bool, bool]:
        """Cloud first; if no first token within the hedge delay, start the edge too; first wins."""
        delay = d.hedge_delay_s or 0.0
        tasks: dict[str, asyncio.Task[tuple[TextDelta | Finish, Events]]] = {
            "cloud": asyncio.create_task(self._first(self.cloud, req))
        }
        done, _ = await asyncio.wait(tasks.values(), timeout=delay)
        if not done:
            tasks["edge"] = asyncio.create_task(self._first(self._backend("edge"), req))
        errors: dict[str, APIError] = {}
        try:
            while tasks:
                done, _ = await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_COMPLETED)
                for name, task in list(tasks.items()):
                    if task not in done:
                        continue
                    del tasks[name]
                    exc = task.exception()
                    if exc is None:
                        first, rest = task.result()
                        timer.mark("ttft")
                        raced = len(tasks) > 0 or (name == "edge" and "cloud" not in errors)
                        for loser in tasks.values():
                            loser.cancel()
                        await _drain_losers(tasks.values())
                        tasks.clear()
                        if "cloud" in errors:
                            d.degraded = d.degraded or "cloud-unavailable"
                            why = errors["cloud"].code or "error"
                            return name, f"fallback:cloud-{why}", first, rest, raced, True
                        if name == "edge":
                            return name, "hedge:edge-won", first, rest, True, False
                        return name, "hedge:cloud-won" if raced else d.reason, first, rest, raced, False
                    if not isinstance(exc, APIError):
                        raise exc
                    errors[name] = exc
                    if name == "cloud" and "edge" not in tasks and "edge" not in errors and d.edge_ok:
                        # The cloud failed before its first token: the edge answers (fall-back).
                        tasks["edge"] = asyncio.create_task(self._first(self._backend("edge"), req))
            # Both failed: report the cloud's error (the route the policy chose).
            raise errors.get("cloud") or next(iter(errors.values()))
        finally:
            for task in tasks.values():
                task.cancel()
            await _drain_losers(tasks.values())

    # ----- after the answer ----------------------------------------------------------------------
    def _finish(self, a: Answer, outcome: str, finish: Finish | None, error: APIError | None, policy: Any) -> None:
        rec = a.record
        rec.route, rec.reason, rec.degraded = a.route, a.reason, a.degraded
        rec.outcome = outcome
        rec.total_ms = a.timer.elapsed_ms()
        rec.ttft_ms = a.timer.marks.get("ttft", a.timer.marks.get("cache"))
        if error is not None:
            rec.status, rec.error_code = error.status, error.code
        if finish is not None:
            rec.model = finish.model or a.model
            rec.prompt_tokens = finish.usage.prompt_tokens
            rec.completion_tokens = finish.usage.completion_tokens
            rec.timings = dict(finish.timings)
            rec.queue_ms = finish.timings.get("queue")
            rec.prefill_ms = finish.timings.get("prefill")
            tps = finish.timings.get("tokens_per_s")
            if tps is None and rec.completion_tokens > 1 and rec.ttft_ms is not None:
                decode_s = (rec.total_ms - rec.ttft_ms) / 1000.0
                tps = (rec.completion_tokens - 1) / decode_s if decode_s > 0 else None
            rec.tokens_per_s = tps
            a.model = rec.model
            if (
                self.cache is not None
                and policy is not None
                and policy.write
                and a.route in ("edge", "cloud")
                and finish.finish_reason == "stop"
            ):
                store = functools.partial(
                    self.cache.store, a.request, a.text, finish, route=a.route, model=rec.model, policy=policy,
                    degraded=a.degraded is not None,
                )
                if self.cache.semantic_enabled:
                    asyncio.get_running_loop().run_in_executor(None, store)
                    rec.cache = "store"
                elif store():
                    rec.cache = "store"
        self._emit(rec)

    def _emit(self, rec: RequestRecord) -> None:
        """Hand the record to the observers on the loop's next turn, after the answer's bytes went out."""
        if self.observe is None:
            return
        try:
            asyncio.get_running_loop().call_soon(self._observe, rec)
        except RuntimeError:  # no running loop (a synchronous caller): observe now
            self._observe(rec)

    def _observe(self, rec: RequestRecord) -> None:
        try:
            self.observe(rec)  # type: ignore[misc]
        except Exception:  # observers must never break a request
            log.exception("request observer failed")


async def _drain_losers(tasks: Any) -> None:
    """Wait for cancelled hedge losers, closing any stream one of them had already opened."""
    pending = list(tasks)
    if not pending:
        return
    await asyncio.wait(pending)
    for task in pending:
        if task.cancelled() or task.exception() is not None:
            continue
        _first, rest = task.result()
        with contextlib.suppress(Exception):
            await rest.aclose()
