"""The fault matrix: every cloud and edge fault, streaming and not, as the kiosk sees it.

For each fault the same simple question is asked four ways: ``edgecloud-auto`` (the policy may use
the other backend) and the faulty backend by name (``edgecloud-cloud`` / ``edgecloud-edge``), each
with and without streaming. What must hold in every cell:

- auto, fault before the first token: a correct answer from the OTHER backend (fall-back);
- forced, fault before the first token: a clean OpenAI-style error with the right status, sent
  as the HTTP status even for a stream (the gateway waits for the first event before headers);
- fault after the first token: a stream ends with an error event, then ``data: [DONE]``; a
  non-streamed answer is a clean 5xx error;
- never later than the configured cloud deadlines allow (``cloud_bound_s`` + the edge's own
  generation time), never a body with a traceback.

How faults are made: cloud faults by the shared fake cloud (bench/fake_cloud.py) and real
unreachable upstreams (a refused port, a ``.invalid`` host that never resolves, a TLS server
whose CA the gateway does not trust); edge faults by a missing model file, a garbage ``.gguf``,
and monkeypatching the loaded model's ``Llama.generate`` (the llama.cpp call the worker thread
drives) to raise ``RuntimeError`` (a decode failure) or ``MemoryError`` (out of memory), or to
block until released (a full queue).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from reliability.kiosk import Seen, chat
from reliability.support import COLUMNS, cloud_bound_s, cloud_section, pin_classifier, swap_cloud

from bench.fake_cloud import FakeCloudHandle, refused_base_url
from harness import GatewayHandle, make_settings, run_gateway

pytestmark = pytest.mark.slow

QUESTION = "What time does the food court open?"
EDGE_QUESTION = "Tell me about the food court and the shops around it."


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, embedded_model: Path,
       fake_cloud: FakeCloudHandle) -> Iterator[GatewayHandle]:
    """One gateway for every row that has a loaded model; its cloud is swapped per row."""
    settings = make_settings(
        tmp_path_factory.mktemp("matrix"),
        # The one-at-a-time runner: the queue-full row holds it through Llama.generate.
        edge={"max_queue": 1, "default_max_tokens": 8, "parallel": 1},
        cache={"enabled": False},
        router={"hedge": False},
        cloud=cloud_section(fake_cloud.base_url),
    )
    with run_gateway(settings) as handle:
        yield handle


@pytest.fixture(scope="module")
def edge_allowance_s(gw: GatewayHandle) -> float:
    """Time the edge needs for one short answer on this (busy, shared) machine, with a margin."""
    times = []
    for _ in range(2):
        seen = chat(gw.base_url, EDGE_QUESTION, model="edgecloud-edge")
        assert seen.ok, seen
        times.append(seen.elapsed_s)
    return max(3.0, 4.0 * max(times))


def _cells(base_url: str, forced_model: str, question: str = QUESTION) -> dict[str, Seen]:
    return {
        "auto": chat(base_url, question),
        "auto+stream": chat(base_url, question, stream=True),
        "forced": chat(base_url, question, model=forced_model),
        "forced+stream": chat(base_url, question, model=forced_model, stream=True),
    }


def _record(matrix: dict[str, dict[str, str]], name: str, cells: dict[str, Seen]) -> None:
    matrix[name] = {col: cells[col].summary() for col in COLUMNS}


def _no_problems(cells: dict[str, Seen]) -> None:
    for col, seen in cells.items():
        assert not seen.problems, (col, seen.problems, seen.raw_tail)
        assert "Traceback" not in seen.raw_tail, (col, seen.raw_tail)


# --------------------------------------------------------------------------- cloud faults


@dataclass(frozen=True)
class CloudFault:
    name: str
    target: str  # "fake", "refused", "dns", "tls"
    fault: str = "none"
    fields: tuple[tuple[str, Any], ...] = ()
    mid_stream: bool = False  # the fault strikes after the first token
    forced_status: tuple[int, ...] = (502, 503, 504)


CLOUD_FAULTS = [
    CloudFault("cloud: connection refused", "refused", forced_status=(502,)),
    CloudFault("cloud: DNS failure (.invalid)", "dns", forced_status=(502, 504)),
    CloudFault("cloud: TLS failure (untrusted CA)", "tls", forced_status=(502,)),
    CloudFault("cloud: 429 storm", "fake", "429", (("retry_after", "0"),), forced_status=(429,)),
    CloudFault("cloud: 5xx", "fake", "status", (("fault_status", 503),), forced_status=(502, 503)),
    CloudFault("cloud: hang before headers", "fake", "hang", (("hang_s", 30.0),), forced_status=(504,)),
    CloudFault("cloud: slow first token", "fake", "slow_first", (("slow_first_s", 30.0),), forced_status=(504,)),
    CloudFault("cloud: stall mid-stream", "fake", "stall", (("stall_after", 2), ("stall_s", 30.0)),
               mid_stream=True),
    CloudFault("cloud: cut mid-stream", "fake", "cut", (("cut_after", 2),), mid_stream=True),
    CloudFault("cloud: malformed SSE", "fake", "malformed", (("malformed_after", 2),), mid_stream=True),
    CloudFault("cloud: gigantic response", "fake", "huge", (("huge_bytes", 2 * 1024 * 1024),), mid_stream=True),
]


def _point_cloud(gw: GatewayHandle, row: CloudFault, fake: FakeCloudHandle, tls: FakeCloudHandle) -> None:
    url = {"fake": fake.base_url, "refused": refused_base_url(), "dns": "http://edgecloud-fault.invalid/v1",
           "tls": tls.base_url}[row.target]
    swap_cloud(gw, url)
    if row.target == "fake":
        fake.set_fault(row.fault, None, **dict(row.fields))


@pytest.mark.parametrize("row", CLOUD_FAULTS, ids=[r.name.split(": ")[1] for r in CLOUD_FAULTS])
def test_cloud_fault(row: CloudFault, gw: GatewayHandle, fake: FakeCloudHandle,
                     untrusted_tls_cloud: FakeCloudHandle, edge_allowance_s: float,
                     matrix: dict[str, dict[str, str]]) -> None:
    pin_classifier(gw, 0.5)  # borderline simple question: the policy sends it to the cloud first
    _point_cloud(gw, row, fake, untrusted_tls_cloud)
    try:
        cells = _cells(gw.base_url, "edgecloud-cloud")
    finally:
        fake.set_fault("none")
        swap_cloud(gw, fake.base_url)
    _record(matrix, row.name, cells)
    _no_problems(cells)
    bound = cloud_bound_s()
    for col, seen in cells.items():
        assert seen.elapsed_s <= bound + edge_allowance_s, (col, seen.elapsed_s, bound)
        assert seen.status != 500, (col, seen)
    if not row.mid_stream:
        # The cloud failed before its first token: auto falls back to the edge ...
        for col in ("auto", "auto+stream"):
            seen = cells[col]
            assert seen.ok and seen.route == "edge", (col, seen)
            assert (seen.reason or "").startswith("fallback:cloud-"), (col, seen.reason)
            assert seen.content.strip(), (col, seen)
            assert not seen.error_event and seen.done == seen.stream
        # ... and a request that insisted on the cloud gets a clean error, as a real HTTP status.
        for col in ("forced", "forced+stream"):
            seen = cells[col]
            assert seen.status in row.forced_status, (col, seen)
            assert (seen.error and seen.error["type"] == "server_error") or seen.status == 429, (col, seen)
            assert seen.elapsed_s <= bound + 1.0, (col, seen.elapsed_s)
        return
    # The fault struck after the first token: nothing can be taken back from a stream.
    for col in ("auto+stream", "forced+stream"):
        seen = cells[col]
        assert seen.status == 200 and seen.route == "cloud", (col, seen)
        assert seen.content, (col, "the tokens before the fault reached the kiosk")
        assert seen.error_event and seen.done, (col, seen)
        assert seen.error["code"].startswith("cloud_"), (col, seen.error)
    for col in ("auto", "forced"):
        seen = cells[col]
        if seen.ok:  # a later version may retry a non-streamed answer on the edge: also fine
            assert col == "auto" and seen.route == "edge", (col, seen)
        else:
            assert seen.status in (502, 504), (col, seen)


def test_kiosk_sdk_sees_clean_errors(gw: GatewayHandle, fake: FakeCloudHandle) -> None:
    """The official ``openai`` client: a typed status error, and an exception (not a hang) mid-stream."""
    import openai

    pin_classifier(gw, 0.5)
    client = gw.openai(timeout=30)
    fake.set_fault("status", None, fault_status=503)
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="edgecloud-cloud", max_tokens=8,
                                       messages=[{"role": "user", "content": QUESTION}])
    assert info.value.status_code == 502
    assert info.value.body["code"] == "cloud_server_error"  # the SDK unwraps {"error": ...}
    answer = client.chat.completions.create(model="edgecloud-auto", max_tokens=8,
                                            messages=[{"role": "user", "content": QUESTION}])
    assert answer.choices[0].message.content  # the edge answered instead
    fake.set_fault("cut", None, cut_after=2)
    got: list[str] = []
    with pytest.raises(openai.APIError):
        stream = client.chat.completions.create(model="edgecloud-cloud", stream=True, max_tokens=8,
                                                messages=[{"role": "user", "content": QUESTION}])
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                got.append(chunk.choices[0].delta.content)
    assert "".join(got).startswith("Echo:")
    fake.set_fault("none")


# --------------------------------------------------------------------------- edge faults


def _fail_generate(exc: BaseException, after: int = 0) -> Callable[[Any], Callable[..., Iterator[int]]]:
    def factory(orig: Callable[..., Iterator[int]]) -> Callable[..., Iterator[int]]:
        def generate(*args: Any, **kwargs: Any) -> Iterator[int]:
            for i, token in enumerate(orig(*args, **kwargs)):
                if i >= after:
                    raise exc
                yield token
            raise exc

        return generate

    return factory


EDGE_FAULTS = {
    "edge: generation error": _fail_generate(RuntimeError("llama_decode returned -1")),
    "edge: out of memory (simulated)": _fail_generate(MemoryError("failed to allocate the KV cache")),
}


@pytest.mark.parametrize("name", list(EDGE_FAULTS), ids=["generation-error", "oom"])
def test_edge_fault_before_first_token(name: str, gw: GatewayHandle, fake: FakeCloudHandle,
                                       edge_allowance_s: float, matrix: dict[str, dict[str, str]],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pin_classifier(gw, 0.99)  # clearly simple: the policy sends it to the edge first
    llama = gw.services.edge.model.llama
    monkeypatch.setattr(llama, "generate", EDGE_FAULTS[name](llama.generate))
    cells = _cells(gw.base_url, "edgecloud-edge", EDGE_QUESTION)
    monkeypatch.undo()
    _record(matrix, name, cells)
    _no_problems(cells)
    for col in ("auto", "auto+stream"):
        seen = cells[col]
        assert seen.ok and seen.route == "cloud", (col, seen)
        assert (seen.reason or "").startswith("fallback:edge-"), (col, seen.reason)
        # The fake cloud echoes the question, cut at max_tokens words.
        assert seen.content.startswith("Echo: Tell me") and f"Echo: {EDGE_QUESTION}".startswith(seen.content)
    for col in ("forced", "forced+stream"):
        seen = cells[col]
        assert seen.status == 500 and not seen.error_event, (col, seen)
        assert seen.error["code"] == "edge_generation_error", (col, seen.error)
    for seen in cells.values():
        assert seen.elapsed_s <= edge_allowance_s + 2.0
    # The model is still usable afterwards: the failure was one request's, not the gateway's.
    assert chat(gw.base_url, EDGE_QUESTION, model="edgecloud-edge").ok


def test_edge_generation_error_mid_stream(gw: GatewayHandle, fake: FakeCloudHandle, edge_allowance_s: float,
                                          matrix: dict[str, dict[str, str]],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pin_classifier(gw, 0.99)
    llama = gw.services.edge.model.llama
    monkeypatch.setattr(llama, "generate", _fail_generate(RuntimeError("llama_decode returned -3"), after=3)(
        llama.generate))
    cells = {col: chat(gw.base_url, EDGE_QUESTION, model=model, stream=stream, max_tokens=16,
                       temperature=0.0)
             for col, model, stream in (("auto", "edgecloud-auto", False), ("auto+stream", "edgecloud-auto", True),
                                        ("forced", "edgecloud-edge", False),
                                        ("forced+stream", "edgecloud-edge", True))}
    monkeypatch.undo()
    _record(matrix, "edge: generation error mid-stream", cells)
    _no_problems(cells)
    for col, seen in cells.items():
        assert seen.elapsed_s <= edge_allowance_s + 2.0
        if seen.ok:  # the model ended its answer within 3 tokens: no fault struck
            continue
        if seen.stream:
            assert seen.status == 200 and seen.error_event and seen.done, (col, seen)
        else:
            assert seen.status == 500, (col, seen)
        assert seen.error["code"] == "edge_generation_error", (col, seen.error)
    assert any(not s.ok for s in cells.values()), "the fault never struck"


def test_edge_queue_full(gw: GatewayHandle, fake: FakeCloudHandle, matrix: dict[str, dict[str, str]],
                         monkeypatch: pytest.MonkeyPatch) -> None:
    """max_queue=1: one generation held in the worker + one waiting; the next edge request is refused."""
    pin_classifier(gw, 0.99)
    edge = gw.services.edge
    llama = edge.model.llama
    gate = threading.Event()
    orig = llama.generate

    def held(*args: Any, **kwargs: Any) -> Iterator[int]:
        gate.wait(60)
        yield from orig(*args, **kwargs)

    monkeypatch.setattr(llama, "generate", held)
    blockers = [threading.Thread(target=chat, args=(gw.base_url, EDGE_QUESTION), kwargs={"model": "edgecloud-edge"})
                for _ in range(2)]
    try:
        for t in blockers:
            t.start()
        deadline = time.monotonic() + 20
        while edge.queue_depth < 2:
            assert time.monotonic() < deadline, "the blockers never filled the queue"
            time.sleep(0.02)
        cells = _cells(gw.base_url, "edgecloud-edge", EDGE_QUESTION)
    finally:
        gate.set()
        for t in blockers:
            t.join(60)
        monkeypatch.undo()
    _record(matrix, "edge: queue full", cells)
    _no_problems(cells)
    for col in ("auto", "auto+stream"):
        assert cells[col].ok and cells[col].route == "cloud" and cells[col].reason == "edge-busy", (col, cells[col])
    for col in ("forced", "forced+stream"):
        seen = cells[col]
        assert seen.status == 503 and seen.error["code"] == "edge_busy", (col, seen)
        assert seen.elapsed_s < 2.0, "a full queue answers at once, it does not wait"


@pytest.mark.parametrize("kind", ["missing", "corrupt"])
def test_edge_model_unusable_at_start(kind: str, tmp_path: Path, fake: FakeCloudHandle,
                                      matrix: dict[str, dict[str, str]]) -> None:
    model = tmp_path / "model.gguf"
    if kind == "corrupt":
        model.write_bytes(b"GGUF" + bytes(range(256)) * 64)  # the magic, then garbage
    settings = make_settings(tmp_path / "data", edge={"model_path": str(model)}, cache={"enabled": False},
                             router={"hedge": False}, cloud=cloud_section(fake.base_url))
    with run_gateway(settings) as g:
        ready = g.services.edge
        assert not ready.ready and ready.load_error, "the gateway started and recorded why the model failed"
        pin_classifier(g, 0.99)
        cells = _cells(g.base_url, "edgecloud-edge")
        readyz = httpx.get(g.base_url + "/readyz", timeout=10)
    _record(matrix, f"edge: model {kind} at start", cells)
    _no_problems(cells)
    assert readyz.status_code == 503 and readyz.json()["status"] == "failed"
    assert "Traceback" not in readyz.text
    for col in ("auto", "auto+stream"):
        seen = cells[col]
        assert seen.ok and seen.route == "cloud" and seen.content == f"Echo: {QUESTION}", (col, seen)
        assert seen.reason in ("edge-unavailable", "no-classifier", "edge-unavailable:degraded"), seen.reason
    for col in ("forced", "forced+stream"):
        seen = cells[col]
        assert seen.status == 503 and seen.error["code"] == "edge_unavailable", (col, seen)
