"""Continuous batching in the edge runner (edge/batch_runner.py), on the real embedded model.

Several requests share one llama.cpp batch per step, and none of them may notice: each gives the same
tokens as alone, a cancelled one frees its slot while the others go on, a long prompt joining is read
in chunks between the others' tokens, and a shared system prompt is read once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from edge.config import EdgeModelConfig
from edge.local_model import LocalModel, find_embedded_model
from edge.types import ChatRequest, Finish, Message, TextDelta

pytestmark = pytest.mark.skipif(find_embedded_model() is None, reason="embedded model not installed")

SYSTEM = ("You are the information kiosk of Riverside Mall. Answer visitors in one or two short sentences. "
          "The mall is open 10:00-22:00. Restrooms are next to the food court on every floor. "
          "Parking: levels P1-P3, first two hours free.")


def request(question: str, system: str | None = SYSTEM, **fields: Any) -> ChatRequest:
    messages = ([Message("system", system)] if system else []) + [Message("user", question)]
    return ChatRequest(messages=messages, **fields)


async def collect(events: AsyncIterator[Any]) -> tuple[str, Finish]:
    parts = []
    async for event in events:
        if isinstance(event, TextDelta):
            parts.append(event.text)
        else:
            return "".join(parts), event
    raise AssertionError("no Finish")


async def loaded(**config: Any) -> LocalModel:
    edge = LocalModel(EdgeModelConfig(**{"n_ctx": 512, "parallel": 4, **config}))
    await edge.load()
    assert edge.model is not None and edge.model.engine is not None, edge.load_error
    return edge


# Four requests that differ in every setting a sequence keeps for itself (the second's stop string is added by
# the test, from the model's own answer).
MIXED = [
    dict(question="Where is the restroom?", temperature=0.0, max_tokens=24),
    dict(question="Count from one to ten in words.", temperature=0.0, max_tokens=40),
    dict(question="Tell me about the parking.", temperature=1.0, seed=1234, max_tokens=32),
    dict(question="What time does the mall open?", temperature=0.7, top_p=0.9, seed=7, max_tokens=20,
         system="You are a cheerful robot at a train station."),
]


def _req(spec: dict[str, Any]) -> ChatRequest:
    spec = dict(spec)
    question = spec.pop("question")
    system = spec.pop("system", SYSTEM)
    return request(question, system, **spec)


def _a_later_word(text: str) -> str:
    """A word of ``text`` whose first occurrence is past its start: a stop string the answer is sure to reach."""
    for word in text.split()[len(text.split()) // 2:]:
        if len(word) >= 3 and text.index(word) > 0:
            return word
    raise AssertionError(f"no word to stop at in {text!r}")


def test_concurrent_requests_give_the_same_tokens_as_alone() -> None:
    async def scenario() -> None:
        edge = await loaded()
        # The second request's stop string comes from its own answer without one: the greedy answer depends on
        # the CPU kernels llama.cpp was built with (an AVX2 and an AVX-512 build answer differently), and the
        # stop must be reached for the test to say anything.
        free, _ = await collect(edge.generate(_req(MIXED[1])))
        stop = _a_later_word(free)
        mixed = [MIXED[0], {**MIXED[1], "stop": [stop]}, *MIXED[2:]]
        alone = [await collect(edge.generate(_req(spec))) for spec in mixed]
        together = await asyncio.gather(*(collect(edge.generate(_req(spec))) for spec in mixed))
        engine = edge.model.engine
        assert engine.stats.steps > 0
        for (text_a, fin_a), (text_b, fin_b), spec in zip(alone, together, mixed, strict=True):
            assert text_a and text_a == text_b, spec
            assert (fin_a.finish_reason, fin_a.usage) == (fin_b.finish_reason, fin_b.usage), spec
        assert together[1][0] == free[:free.index(stop)] and together[1][1].finish_reason == "stop"
        # Twice more at once, in another order: the seeded draws stay the seeded draws.
        again = await asyncio.gather(*(collect(edge.generate(_req(spec))) for spec in reversed(mixed)))
        assert [t for t, _ in reversed(again)] == [t for t, _ in alone]
        await edge.aclose()

    asyncio.run(scenario())


def test_batch_steps_hold_several_sequences() -> None:
    async def scenario() -> None:
        edge = await loaded()
        engine = edge.model.engine
        sizes: list[int] = []
        decode = engine.batch.decode

        def recording() -> int:
            sizes.append(engine.batch.n)
            return decode()

        engine.batch.decode = recording  # type: ignore[method-assign]
        await asyncio.gather(*(collect(edge.generate(request(q, temperature=0.0, max_tokens=16)))
                               for q in ("Hi!", "Where is the ATM?", "Is there Wi-Fi?", "Thanks!")))
        assert max(sizes) >= 3, sizes  # the answers advanced together, not one after another
        await edge.aclose()

    asyncio.run(scenario())


def test_a_cancelled_stream_frees_its_slot_while_the_others_go_on() -> None:
    async def scenario() -> None:
        edge = await loaded(parallel=2)
        long = dict(temperature=0.0, max_tokens=200)
        leaving = edge.generate(request("Write a long story about a dragon.", **long))
        staying = edge.generate(request("Write a long poem about the sea.", **long))
        got = 0
        async for event in leaving:
            if isinstance(event, TextDelta):
                got += 1
                if got == 3:
                    break
        assert edge.busy_slots == 2 or got == 3
        await leaving.aclose()  # the client went away
        texts: list[str] = []
        freed_while_streaming = False
        async for event in staying:
            if isinstance(event, TextDelta):
                texts.append(event.text)
                freed_while_streaming = freed_while_streaming or edge.busy_slots == 1
            else:
                finish = event
        assert freed_while_streaming, "the cancelled request kept its slot"
        assert finish.finish_reason == "length" and finish.usage.completion_tokens == 200
        # The freed slot takes a new request at once, beside the other.
        _text, fin = await collect(edge.generate(request("Hi!", temperature=0.0, max_tokens=4)))
        assert fin.timings["queue"] < 1000
        await edge.aclose()

    asyncio.run(scenario())


def test_a_long_prompt_joining_holds_the_others_up_by_one_chunk_at_most() -> None:
    chunk = 32

    async def scenario() -> None:
        edge = await loaded(n_ctx=2048, parallel=2, prefill_chunk=chunk)
        engine = edge.model.engine
        steps: list[tuple[int, set[int]]] = []
        decode = engine.batch.decode
        raw = engine.batch._raw

        def recording() -> int:
            seqs = {raw.seq_id[i][0] for i in range(engine.batch.n)}
            steps.append((engine.batch.n, seqs))
            return decode()

        engine.batch.decode = recording  # type: ignore[method-assign]
        streaming = edge.generate(request("Write a long story about a dragon.", temperature=0.0, max_tokens=120))
        first = await streaming.__anext__()
        assert isinstance(first, TextDelta)
        streaming_seq = next(s.seq_id for s in engine.slots if s.job is not None)
        long_question = "Which gate does the evening flight to Lisbon leave from? " * 40  # ~500 tokens
        joining = asyncio.ensure_future(collect(edge.generate(request(long_question, temperature=0.0,
                                                                      max_tokens=8))))
        _rest, finish = await collect(streaming)
        _long_text, long_finish = await joining
        assert finish.usage.completion_tokens == 120 and long_finish.usage.prompt_tokens > 400
        reading = [(n, seqs) for n, seqs in steps if len(seqs) == 2]
        assert len(reading) >= long_finish.usage.prompt_tokens // chunk - 1, "the prompt was read in chunks"
        # Every step while the long prompt was read carried the stream's next token and one chunk at most.
        for n, seqs in reading:
            assert streaming_seq in seqs and n <= chunk + 1, (n, seqs)
        await edge.aclose()

    asyncio.run(scenario())


def test_each_slot_reuses_the_system_prompt_it_holds() -> None:
    system = SYSTEM + " The mall has three floors, a food court, two pharmacies and a cinema." * 4

    async def scenario() -> None:
        edge = await loaded(parallel=2)
        first = await asyncio.gather(*(collect(edge.generate(request(q, system, temperature=0.0, max_tokens=6)))
                                       for q in ("Where is the cinema?", "Is there a pharmacy?")))
        assert [fin.timings["prompt_tokens_reused"] for _, fin in first] == [0, 0]  # per-slot cells
        second = await asyncio.gather(*(collect(edge.generate(request(q, system, temperature=0.0, max_tokens=6)))
                                        for q in ("Where can I eat?", "Which floor has shoes?")))
        assert all(fin.timings["prompt_tokens_reused"] >= 100 for _, fin in second)
        await edge.aclose()

    asyncio.run(scenario())


def test_a_unified_cache_reads_a_shared_system_prompt_once() -> None:
    system = SYSTEM + " The mall has three floors, a food court, two pharmacies and a cinema." * 4

    async def scenario() -> None:
        edge = await loaded(kv_unified=True)
        # Four kiosks ask at the same moment, nothing cached yet: one reads the system prompt, the
        # others wait for it and share its cells.
        results = await asyncio.gather(*(collect(edge.generate(request(q, system, temperature=0.0, max_tokens=6)))
                                         for q in ("Where is the cinema?", "Is there a pharmacy?",
                                                   "Where can I eat?", "Which floor has shoes?")))
        reused = sorted(fin.timings["prompt_tokens_reused"] for _, fin in results)
        assert reused[0] == 0 and all(r >= 100 for r in reused[1:]), reused
        # Later requests start from the cached prompt too.
        _, fin = await collect(edge.generate(request("Is there an ATM?", system, temperature=0.0, max_tokens=4)))
        assert fin.timings["prompt_tokens_reused"] >= 100
        await edge.aclose()

    asyncio.run(scenario())


def test_the_queue_past_the_slots_is_bounded() -> None:
    async def scenario() -> None:
        from edge.errors import APIError

        edge = await loaded(parallel=2, max_queue=1)
        long = dict(temperature=0.0, max_tokens=16)
        streams = [edge.generate(request(f"Tell me story number {i}.", **long)) for i in range(3)]
        firsts = [asyncio.ensure_future(s.__anext__()) for s in streams]
        deadline = time.monotonic() + 30
        while not (edge.busy_slots == 2 and edge.waiting == 1):
            assert time.monotonic() < deadline, (edge.busy_slots, edge.waiting)
            await asyncio.sleep(0.001)
        assert edge.queue_full and edge.queue_depth == 3
        with pytest.raises(APIError) as err:
            await edge.generate(request("One more?", **long)).__anext__()
        assert err.value.status == 503 and err.value.code == "edge_busy"
        assert edge.expected_ttft_s() > 0
        for first, stream in zip(firsts, streams, strict=True):
            await first
            await collect(stream)
        await edge.aclose()

    asyncio.run(scenario())


def test_sampler_chains_are_pooled() -> None:
    async def scenario() -> None:
        edge = await loaded()
        pool = edge.model.engine.samplers
        for _ in range(3):
            await collect(edge.generate(request("Hi!", temperature=0.0, max_tokens=4)))
        assert pool.built == 1
        # Three at once need a chain each while they overlap. How many overlap is the scheduler's call
        # (on a loaded machine the first may finish before the third is admitted): two or three.
        await asyncio.gather(*(collect(edge.generate(request("Hi!", temperature=0.0, max_tokens=16)))
                               for _ in range(3)))
        built = pool.built
        assert 2 <= built <= 3
        for _ in range(2):  # later ones reuse them
            await collect(edge.generate(request("Hi!", temperature=0.0, max_tokens=4)))
        assert pool.built == built
        await edge.aclose()

    asyncio.run(scenario())


def test_wait_estimate_is_the_prefill_behind_the_step_not_the_answers_ahead() -> None:
    async def scenario() -> None:
        edge = await loaded(parallel=4)
        engine = edge.model.engine
        engine.stats.step_s, engine.stats.prefill_s, engine.stats.out_tokens = 0.01, 0.05, 100
        idle = edge.expected_ttft_s()
        streams = [edge.generate(request(f"Story {i}.", temperature=0.0, max_tokens=200)) for i in range(3)]
        for s in streams:
            await s.__anext__()
        gate, inside = threading.Event(), threading.Event()

        def hold() -> None:  # no step runs while the figures are read
            inside.set()
            gate.wait(30)

        edge._compute.call(hold)
        try:
            # Once the compute thread is inside ``hold``, the step that was running has recorded its
            # timings: none lands after the figures below are set.
            assert await asyncio.to_thread(inside.wait, 30)
            engine.stats.step_s, engine.stats.prefill_s, engine.stats.out_tokens = 0.01, 0.05, 100
            # Three answering, one slot free: a step plus a prompt reading, as when idle.
            assert edge.expected_ttft_s() == pytest.approx(idle)
            # One submitted for the free slot: the next request waits for the first slot to free (its
            # tokens left at the step time).
            fourth = edge.generate(request("Story 4.", temperature=0.0, max_tokens=200))
            pending = asyncio.ensure_future(fourth.__anext__())
            await asyncio.sleep(0.05)
            assert len(engine.pending) == 1 and edge.waiting == 0  # it takes the free slot at the next step
            left = min(100 - s.job.n_out for s in engine.slots if s.job is not None) * 0.01
            assert edge.expected_ttft_s() == pytest.approx(left + 0.01 + 0.05)
        finally:
            gate.set()
        await pending
        for s in [*streams, fourth]:
            await s.aclose()
        await edge.aclose()

    asyncio.run(scenario())


def test_hot_swap_keeps_streams_on_the_old_model() -> None:
    async def scenario() -> None:
        from pathlib import Path

        edge = await loaded(parallel=2)
        before, _ = await collect(edge.generate(request("Where is the restroom?", temperature=0.0, max_tokens=12)))
        old_engine = edge.model.engine
        streaming = edge.generate(request("Write a long story.", temperature=0.0, max_tokens=60))
        await streaming.__anext__()
        await edge.swap(Path(str(edge.model_path)), "same-file-again")
        assert edge.model.engine is not old_engine and old_engine.retired
        _rest, finish = await collect(streaming)  # finishes on the old model
        assert finish.usage.completion_tokens == 60
        after, _ = await collect(edge.generate(request("Where is the restroom?", temperature=0.0, max_tokens=12)))
        assert after == before
        deadline = time.monotonic() + 5
        while old_engine in edge._compute._engines and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert old_engine not in edge._compute._engines, "the old model was let go"
        await edge.aclose()

    asyncio.run(scenario())
