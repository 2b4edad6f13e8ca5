"""One request's way through the gateway: cache -> policy -> backend(s) -> answer.

``Pipeline.start`` returns only once the answer's first event exists (or raises before anything
was sent). That is deliberate: the HTTP status and the route headers of a stream are then true (a
full edge queue is a real 503, a hedge's winner is in ``x-edgecloud-route``), and a backend that
fails before its first token is replaced by the other one without the kiosk ever seeing the
failure. After the first token a streamed answer cannot change backend (the kiosk has the text):
its failure ends the stream with an error event. ``Pipeline.complete`` runs a non-streamed answer
to its end, and as nothing has reached the kiosk yet, a failure mid-answer restarts it on the other
backend when the policy allows. Every fall-back lives here; the HTTP layer only translates.

``Pipeline.preview`` is the same way without generating and without side effects (``/v1/route``):
the cache is peeked, not looked up (no hit or miss counted, no LRU refresh).

The parts are typed by the protocols in ``edge.backends``. No web framework here: the router's
refusals leave as ``Refused``, and the app gives them a status; the app turns an ``Answer`` into
JSON or SSE.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .answer import Answer, CachePreview, Events, Preview, Refused, Started, cache_reason
from .backends import AnswerCacheStore, CloudRouteBackend, EdgeBackend, GeneratingBackend, KnowledgeSource
from .constrained import ConstrainedEdge, prepare
from .early_start import EarlyStarts
from .errors import APIError, internal
from .hedging import First, hedged
from .records import RequestRecord
from .router import Decision, LiveState, Router
from .schemas import reject_for_edge
from .types import ChatRequest, Finish, TextDelta, Timer, Usage

if TYPE_CHECKING:
    from .cache import CacheHit, CachePolicy
    from .knowledge import Evidence

log = logging.getLogger("edgecloud.pipeline")
T = TypeVar("T")


@dataclass(frozen=True)
class TimedDecision:
    """A decision and when its parts were known, in ms from the start of ``Pipeline.decide_timed``."""

    decision: Decision  # the final one
    first_ms: float  # the n-gram stage's decision
    final_ms: float  # the final decision (the encoder's, where it ran)
    backend_ms: float  # the backend that answers is called: first_ms where the early start is kept
    early_start: str | None  # "kept" | "switched" | None (nothing started early)


class Pipeline:
    """Holds the parts (set in the app's lifespan) and runs requests through them.

    Any edge model, cloud client, cache or knowledge base that meets the protocols of
    ``edge.backends`` can stand in (``tests/pipeline`` scripts fakes that way).
    """

    def __init__(
        self,
        router: Router,
        edge: EdgeBackend,
        cloud: CloudRouteBackend | None = None,
        cache: AnswerCacheStore | None = None,
        observe: Callable[[RequestRecord], None] | None = None,
        log_prompts: bool = False,
        knowledge: KnowledgeSource | None = None,
    ) -> None:
        self.router = router
        self.edge = edge
        self.cloud = cloud
        self.cache = cache
        self.observe = observe
        self.log_prompts = log_prompts
        self.knowledge = knowledge
        self._dropping: set[asyncio.Future] = set()  # early starts being dropped (edge/early_start.py)

    # ----- state ------------------------------------------------------------------------------
    def live_state(self) -> LiveState:
        edge, cloud = self.edge, self.cloud
        return LiveState(
            edge_ready=edge.ready,
            edge_expected_ttft_s=edge.expected_ttft_s() if edge.ready else 0.0,
            edge_queue_full=edge.queue_full,
            edge_n_ctx=edge.n_ctx,
            edge_tools=edge.tools_state,
            cloud_enabled=bool(cloud and cloud.enabled),
            cloud_available=bool(cloud and cloud.enabled and cloud.available()),
            cloud_ttft_p95_s=cloud.ttft_p95_s() if cloud and cloud.enabled else None,
        )

    def decide(self, req: ChatRequest) -> Decision:
        """The router's final decision, evidence looked up here (a synchronous caller: tests)."""
        return self.decide_timed(req).decision

    def decide_timed(self, req: ChatRequest) -> TimedDecision:
        """What ``start`` decides, synchronously, with when each part is known (``bench/route_overhead.py``):
        the n-gram stage's decision, the final one, and when the backend that answers is called: at the first
        where that backend starts early (``_refine_while_starting``; ``[router] early_start``)."""
        began = time.perf_counter()

        def ms() -> float:
            return (time.perf_counter() - began) * 1000.0

        knowledge = self.knowledge
        evidence = knowledge.evidence(req.last_user_message) if knowledge is not None else None
        live = self.live_state()
        classifier, first = self._first_stage(req)
        decision = self._decide(req, evidence, live, first)
        refinable = _refinable(decision, first)
        names = self._early_names(req, decision) if refinable else []
        first_ms = ms()
        if not refinable:
            return TimedDecision(decision, first_ms, first_ms, first_ms, None)
        final = self._decide(req, evidence, live, classifier.second_stage(req.last_user_message, first))
        final_ms = ms()
        if not names:
            return TimedDecision(final, first_ms, final_ms, final_ms, None)
        if final.route in names:
            return TimedDecision(final, first_ms, final_ms, first_ms, "kept")
        return TimedDecision(final, first_ms, final_ms, final_ms, "switched")

    async def _decide_async(self, req: ChatRequest, evidence: Evidence | None) -> Decision:
        """The final decision, as ``preview`` reports it: the n-gram stage's, or the encoder's where that one
        is unsure (its milliseconds of CPU in a worker thread: on the event loop they would hold every other
        stream)."""
        live = self.live_state()
        classifier, first = self._first_stage(req)
        decision = self._decide(req, evidence, live, first)
        if _refinable(decision, first):
            second = await _second_stage(classifier, req.last_user_message, first)
            if second is None:
                decision.rules.append("encoder-failed")
            else:
                decision = self._decide(req, evidence, live, second)
        return decision

    def _first_stage(self, req: ChatRequest) -> tuple[Any, Any]:
        """The classifier and its n-gram stage's result for a single-turn text; ``(classifier, None)`` where
        the classifier has no stages or the router will not classify (a conversation goes by rule)."""
        classifier = self.router.classifier
        stage = getattr(classifier, "first_stage", None)
        text = req.last_user_message
        if stage is None or not text or req.is_multi_turn:
            return classifier, None
        return classifier, stage(text)

    def _decide(self, req: ChatRequest, evidence: Evidence | None, live: LiveState | None = None,
                intent: Any = None) -> Decision:
        """The router's decision on ``live`` (read now when None), with ``intent`` the classifier's result
        where the caller has one (None: the router classifies, both stages)."""
        live = live or self.live_state()
        prepare(req, live.edge_tools)  # a tool request the device may answer gets its grammar
        # The exact count only when the prompt may not fit: the byte bound decides most kiosk requests
        # without the tokenizer, which costs more than the rest of the decision; over the budget the
        # router counts only where the size changes the route (``Router.decide``).
        tokens = self.edge.prompt_token_bound(req)
        if tokens <= self.router.prompt_budget(live):
            return self.router.decide(req, live, tokens, evidence=evidence, prompt_tokens_exact=False,
                                      intent=intent)
        edge = self.edge
        return self.router.decide(req, live, tokens, evidence=evidence, prompt_tokens_exact=False,
                                  count_tokens=lambda: edge.count_prompt_tokens(req), intent=intent)

    async def evidence(self, req: ChatRequest) -> Evidence | None:
        """Venue evidence for the request: BM25 is sub-millisecond and runs here; the optional dense
        vectors run an embedding model (tens of ms), so then it runs in a worker thread."""
        knowledge = self.knowledge
        if knowledge is None:
            return None
        if knowledge.dense_enabled:
            return await asyncio.to_thread(knowledge.evidence, req.last_user_message)
        return knowledge.evidence(req.last_user_message)

    @staticmethod
    async def _read_cache(cache: AnswerCacheStore, read: Callable[[ChatRequest, CachePolicy], T],
                          req: ChatRequest, policy: CachePolicy) -> T:
        """A cache read (``lookup`` or ``peek``): semantic matching runs an embedding model (tens of
        ms), so then it runs in a worker thread; an exact read is one indexed SELECT and runs here."""
        if cache.semantic_enabled:
            return await asyncio.to_thread(read, req, policy)
        return read(req, policy)

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

    def count_refused(self, refused: Refused, error: APIError) -> None:
        """A request the router refused, once the HTTP layer gave the refusal its status."""
        self._failed(refused.record, refused.timer, error)

    def _failed(self, record: RequestRecord, timer: Timer, exc: APIError) -> None:
        record.outcome = "rejected" if exc.status < 500 else "error"
        record.status, record.error_code = exc.status, exc.code
        record.total_ms = timer.elapsed_ms()
        self._emit(record)

    # ----- the request path ---------------------------------------------------------------------
    async def start(self, req: ChatRequest) -> Answer:
        """The answer with its first event in hand; raises ``APIError`` or ``Refused`` before it."""
        timer = Timer(start=req.received_at)
        record = self.new_record(req)
        try:
            return await self._start(req, timer, record)
        except APIError as exc:
            self._failed(record, timer, exc)
            raise

    async def complete(self, req: ChatRequest) -> Answer:
        """A non-streamed answer, run to its end (``answer.finish`` set), with every fall-back:
        before the first token as ``start`` does, and mid-answer by restarting on the other backend
        (nothing reached the kiosk yet). Raises ``APIError`` or ``Refused``; one record either way."""
        answer = await self.start(req)
        answer.hold = True
        try:
            error = await answer.run_to_end()
        except BaseException:
            answer.settle()
            raise
        if error is None:
            answer.settle()
            return answer
        try:
            retry = await self._restart_elsewhere(answer, error)
        except APIError as exc:  # the other backend failed too, before its first token
            answer.record.fallback = True
            answer.settle("error", exc)
            raise
        except BaseException:
            answer.settle("cancelled")
            raise
        if retry is None:
            answer.settle()
            raise error
        error = await retry.run_to_end()  # not held: it settles the request's record itself
        if error is not None:
            raise error
        return retry

    async def preview(self, req: ChatRequest, *, peek_cache: bool) -> Preview:
        """Where ``start`` would send the request, generating nothing and changing nothing.

        ``peek_cache``: whether to say if the answer is cached (it tells what others asked)."""
        cache, cache_view = self.cache, None
        if cache is not None:
            policy = cache.policy(req)
            cache_view = CachePreview(policy.read, policy.write, policy.reason, disclosed=peek_cache)
            if policy.read and peek_cache:
                cache_view.hit = await self._read_cache(cache, cache.peek, req, policy)
        started = time.perf_counter()
        decision = await self._decide_async(req, await self.evidence(req))
        return Preview(decision, (time.perf_counter() - started) * 1000.0, cache_view)

    async def _start(self, req: ChatRequest, timer: Timer, record: RequestRecord) -> Answer:
        cache, policy = self.cache, None
        if cache is not None:
            policy = cache.policy(req)
            if policy.read:
                hit = await self._read_cache(cache, cache.lookup, req, policy)
                if hit is not None:
                    timer.mark("cache")
                    return self._cache_answer(req, timer, record, hit)
            record.cache = "miss" if policy.read else "bypass"

        evidence = await self.evidence(req)
        live = self.live_state()
        classifier, first = self._first_stage(req)
        decision = self._decide(req, evidence, live, first)
        early: EarlyStarts | None = None
        if _refinable(decision, first):
            decision, early = await self._refine_while_starting(req, evidence, live, classifier, first, decision,
                                                                timer)
        try:
            if early is not None and decision.route in early.names:
                timer.mark("route", early.started_ms)  # the backend that answers was called then
            else:
                timer.mark("route")
            record.scenario, record.label, record.confidence = (decision.scenario, decision.label,
                                                                decision.confidence)
            if decision.refusal is not None:
                record.reason = decision.reason
                raise Refused(decision.refusal, record, timer)
            if decision.knowledge_refusal:
                return self._knowledge_answer(req, timer, record, decision)
            if decision.route == "edge":
                reject_for_edge(req, self.edge.tools_state)
            backend_req = self._grounded(req, decision)
            started = await self._run(backend_req, decision, timer, early)
        finally:
            if early is not None:
                record.early_dropped = ",".join(early.unused) or None
                early.drop_unused()
        if early is not None:
            record.early_start = "kept" if started.route in early.taken else "switched"
        record.hedged, record.fallback = started.hedged, started.fallback
        reason = started.reason
        if backend_req is not req and not reason.startswith("knowledge:"):
            reason = f"{reason};{decision.knowledge.rule}"
        answer = Answer(
            request=req, route=started.route, reason=reason, model="", timer=timer, record=record,
            first=started.first, rest=started.rest, degraded=decision.degraded if started.route == "edge" else None,
            cache=record.cache, decision=decision, backend_request=backend_req,
        )
        answer._settle = functools.partial(self._finish, policy=policy)
        return answer

    async def _refine_while_starting(
        self, req: ChatRequest, evidence: Evidence | None, live: LiveState, classifier: Any, first: Any,
        provisional: Decision, timer: Timer,
    ) -> tuple[Decision, EarlyStarts | None]:
        """The encoder decides a request the n-gram stage was unsure of, while backends start: the final
        decision, and the backends started early (``edge/early_start.py``) for ``_run`` to take from.

        Which start (``[router] early_start``): "both" calls the device and the cloud at once, so the final
        decision finds its backend running whichever it picks; "route" calls only the n-gram stage's route
        (the encoder changes the route of about one unsure request in five, and those wait for it); "off"
        none. The live state is the one read once for both decisions, so an early start's own slot cannot
        change the second one.
        """
        early: EarlyStarts | None = None
        names = self._early_names(req, provisional)
        if names:
            early = EarlyStarts(self._dropping, timer.mark("route"))
            backend_req = self._grounded(req, provisional)
            for name in names:
                early.start(name, functools.partial(self._first, self._backend(name), backend_req))
        try:
            second = await _second_stage(classifier, req.last_user_message, first)
        except BaseException:
            if early is not None:
                early.drop_unused()
            raise
        final = self._decide(req, evidence, live, second) if second is not None else provisional
        timer.mark("encoder")
        if second is None:
            final.rules.append("encoder-failed")
        if early is not None:
            final.rules.append(f"early-start:{'+'.join(names)}")
        return final, early

    def _early_names(self, req: ChatRequest, provisional: Decision) -> list[str]:
        """The backends to call before the final decision, per ``[router] early_start``."""
        mode = self.router.config.early_start
        if mode == "off":
            return []
        if mode == "route":
            if provisional.refusal is not None or provisional.knowledge_refusal:
                return []
            wanted = [provisional.route]
        else:
            wanted = ["edge", "cloud"]
        return [name for name in wanted if self._can_start(name, req)]

    def _can_start(self, name: str, req: ChatRequest) -> bool:
        if name == "edge":
            if not self.edge.ready:
                return False
            try:
                reject_for_edge(req, self.edge.tools_state)
            except APIError:
                return False
            return True
        cloud = self.cloud
        return bool(cloud is not None and cloud.enabled and cloud.available())

    def _cache_answer(self, req: ChatRequest, timer: Timer, record: RequestRecord, hit: CacheHit) -> Answer:
        usage = hit.usage if isinstance(hit.usage, Usage) else Usage()
        first, rest = _replay(req, hit.text, Finish(hit.finish_reason, usage, {}, hit.model))
        record.cache = "hit"
        answer = Answer(
            request=req, route="cache", reason=cache_reason(hit), model=hit.model, timer=timer, record=record,
            first=first, rest=rest, cache="hit",
        )
        answer._settle = functools.partial(self._finish, policy=None)
        return answer

    def _grounded(self, req: ChatRequest, d: Decision) -> ChatRequest:
        """The request with the venue facts in its system prompt (edge/knowledge), or ``req``."""
        if d.knowledge is None or self.knowledge is None:
            return req
        from .knowledge.grounding import ground

        return ground(req, d.knowledge, self.knowledge.max_prompt_tokens)

    def _knowledge_answer(self, req: ChatRequest, timer: Timer, record: RequestRecord, d: Decision) -> Answer:
        """Strict mode, a venue question, no evidence: the operator's "ask staff" text, on the device."""
        model = "edgecloud-knowledge"
        first, rest = _replay(req, d.knowledge.refusal, Finish("stop", Usage(), {}, model))
        timer.mark("ttft")
        answer = Answer(
            request=req, route="edge", reason=d.reason, model=model, timer=timer, record=record,
            first=first, rest=rest, cache=record.cache, decision=d,
        )
        answer._settle = functools.partial(self._finish, policy=None)
        return answer

    async def _run(self, req: ChatRequest, d: Decision, timer: Timer, early: EarlyStarts | None = None) -> Started:
        """Start the chosen backend (hedged, or with a fall-back before its first token), taking a backend
        from ``early`` where it was started before the decision (``_refine_while_starting``)."""
        primary = d.route
        other = "cloud" if primary == "edge" else "edge"

        def starter(name: str) -> Callable[[], Awaitable[First]]:
            task = early.take(name) if early is not None else None
            if task is not None:
                return lambda: task
            return functools.partial(self._first, self._backend(name), req)

        if d.hedge and primary == "cloud" and d.edge_ok and self.cloud is not None:
            return await hedged(starter("cloud"), lambda: starter("edge")(), d, timer)
        try:
            first, rest = await starter(primary)()
            timer.mark("ttft")
            return Started(primary, d.reason, first, rest)
        except APIError as exc:
            if not self._may_fall_back(d, other, exc):
                raise
            log.info("fall-back %s -> %s: %s", primary, other, exc.message)
            if other == "edge":
                reject_for_edge(req, self.edge.tools_state)
            first, rest = await starter(other)()
            timer.mark("ttft")
            if other == "edge":
                d.degraded = d.degraded or "cloud-unavailable"
            return Started(other, f"fallback:{primary}-{exc.code or 'error'}", first, rest, False, True)

    async def _restart_elsewhere(self, answer: Answer, exc: APIError) -> Answer | None:
        """A non-streamed answer failed mid-way: nothing reached the kiosk, so the other backend may
        answer it from scratch when the policy allows (None if it may not). Same request record."""
        d = answer.decision
        if d is None or answer.route not in ("edge", "cloud"):
            return None
        other = "cloud" if answer.route == "edge" else "edge"
        if not self._may_fall_back(d, other, exc):
            return None
        log.info("restart %s -> %s after a mid-answer failure: %s", answer.route, other, exc.message)
        req = answer.request
        if other == "edge":
            reject_for_edge(req, self.edge.tools_state)
        first, rest = await self._first(self._backend(other), answer.backend_request or req)
        record = answer.record
        record.fallback = True
        answer.timer.mark("ttft")
        retry = Answer(
            request=req, route=other, reason=f"fallback:{answer.route}-{exc.code or 'error'}", model="",
            timer=answer.timer, record=record, first=first, rest=rest,
            degraded="cloud-unavailable" if other == "edge" else None, cache=answer.cache, decision=d,
            backend_request=answer.backend_request,
        )
        retry._settle = functools.partial(self._finish, policy=None)
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
    async def _first(backend: GeneratingBackend, req: ChatRequest) -> First:
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

    # ----- after the answer ----------------------------------------------------------------------
    def _finish(self, a: Answer, outcome: str, finish: Finish | None, error: APIError | None,
                policy: CachePolicy | None) -> None:
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


def _refinable(d: Decision, first: Any) -> bool:
    """Whether the encoder may change ``d``: the n-gram stage was unsure and the router used its label."""
    return first is not None and getattr(first, "needs_encoder", False) and d.label is not None


async def _second_stage(classifier: Any, text: str, first: Any) -> Any:
    """The encoder's result, in a worker thread; None where it failed (then the n-gram stage's decision
    stands: a broken second stage must not take the router down with it)."""
    try:
        return await asyncio.to_thread(classifier.second_stage, text, first)
    except Exception as exc:
        log.warning("the classifier's encoder stage failed, the n-gram stage decides: %s", exc)
        return None


def _replay(req: ChatRequest, text: str, finish: Finish) -> First:
    """A stored text as a backend stream: in chunks when streamed, whole when not."""
    from .cache import replay_chunks

    chunks = replay_chunks(text) if req.stream else [text]

    async def rest() -> Events:
        for chunk in chunks[1:]:
            yield TextDelta(chunk)
        yield finish

    first: TextDelta | Finish = TextDelta(chunks[0]) if chunks and chunks[0] else finish
    return first, rest()


__all__ = ["Answer", "CachePreview", "Pipeline", "Preview", "Refused", "TimedDecision", "cache_reason"]
