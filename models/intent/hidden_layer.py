"""A one-hidden-layer network over the hashed features: fit (scikit-learn), score, export to ONNX.

Why a hidden layer: the linear model gives every feature one weight whatever else the message holds, so a
long story's length bucket and its "legal" or "medical" words push a message towards the cloud even when
its final ask is "is the café open?". Sixteen ReLU units can weigh the story by what the ask is. The input
is the same sparse vector as the linear model's (``features.featurize``), so the runtime and its feature
code do not change: only the ONNX graph behind the same ``indices``/``values`` -> ``probs`` contract does.

The graph: ``Gather`` the rows of the first layer's weights for the request's indices, multiply the row of
values by them (a sparse matrix product as one dense ``MatMul`` of 1 x n by n x 16), add the bias, ReLU, dot
with the output weights, add the output bias; then the same ``logit`` and ``probs`` outputs as the linear
graph. Why ``MatMul`` and not ``Mul`` then ``ReduceSum`` over the rows: the same sums, but onnxruntime's
``ReduceSum`` over the first axis of an n x 16 matrix took twice as long as its ``MatMul`` (about 90 against
45 us for a 900-feature request), and that difference grows with the message.

The first layer is stored as int8 with one float16 scale a row (``quantize_rows``): 4.7 MB against 8.4 MB for
float16, which keeps the router's model folder under 30 MB beside the encoder stage. A row is one hashed
feature's weights into the sixteen units, so its own scale follows that feature's size; one scale a unit moved
the logit five times as far (mean 0.017 against 0.004 on the shipped model's 36,961 texts). The graph widens the
whole table from constants (``Cast``, times the scales), which onnxruntime folds once when the session loads:
a request gathers float32 rows and does no dequantizing of its own (per request it was three more nodes and
about 12 us at the median; the session holds the 16 MB float32 table instead). ``logit`` here computes with the
same stored numbers, so the threshold chosen in training is the one the kiosk's ONNX run meets. A model written
before (a float16 table, no scales) loads and exports the same way, its table widened once too.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from scipy import sparse

from models.intent.onnx_graph import write_intent_graph


def quantize_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``w`` (dim, hidden) as int8 rows and a float16 scale a row, ``w ≈ q * scale[:, None]``.

    The scale is the row's largest magnitude over 127, rounded to float16 (up where rounding to nearest would
    push that magnitude past 127 steps) before the int8 numbers are chosen against it, so each weight is within
    half a step of what the file stores; an all-zero row has scale zero."""
    peak = np.abs(w).max(axis=1)
    scale = (peak / 127.0).astype(np.float16)
    short = scale.astype(np.float64) * 127.0 < peak
    scale[short] = np.nextafter(scale[short], np.float16(np.inf))
    wide = scale.astype(np.float64)
    q = np.divide(w, wide[:, None], out=np.zeros(w.shape, np.float64), where=wide[:, None] > 0)
    return np.clip(np.round(q), -127, 127).astype(np.int8), scale


@dataclass(frozen=True)
class HiddenLayerModel:
    """``logit = w2 · relu(x @ (w1 * w1_scale) + b1) + b2``; P(complex) is its sigmoid."""

    w1: np.ndarray  # (dim, hidden) int8, or float16 for a model written before the int8 table
    b1: np.ndarray  # (hidden,) float32
    w2: np.ndarray  # (hidden,) float32
    b2: float
    w1_scale: np.ndarray | None = None  # (dim,) float16 per row of an int8 ``w1``

    def first_layer(self) -> np.ndarray:
        """The first layer's weights as the graph computes with them, in float64."""
        w = self.w1.astype(np.float64)
        return w if self.w1_scale is None else w * self.w1_scale.astype(np.float64)[:, None]

    def logit(self, x: sparse.csr_matrix) -> np.ndarray:
        hidden = np.maximum(x @ self.first_layer() + self.b1.astype(np.float64), 0.0)
        return hidden @ self.w2.astype(np.float64) + self.b2

    def p_complex(self, x: sparse.csr_matrix) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.logit(x)))

    def shifted(self, delta: float) -> HiddenLayerModel:
        """The same network with ``delta`` taken off the output bias (the label cut baked in)."""
        return replace(self, b2=self.b2 - delta)

    def export(self, path: Path, version: str) -> None:
        """Write the graph; inputs, outputs and format as every intent model's (``onnx_graph``)."""
        inits = [
            numpy_helper.from_array(self.w1, "w1"),
            numpy_helper.from_array(self.b1.astype(np.float32), "b1"),
            numpy_helper.from_array(self.w2.astype(np.float32), "w2"),
            numpy_helper.from_array(np.asarray(self.b2, dtype=np.float32), "b2"),
            numpy_helper.from_array(np.asarray([0], dtype=np.int64), "axis0"),
        ]
        # the float32 table, from constants only: folded when the session loads, never run per request
        nodes = [helper.make_node("Cast", ["w1"], ["w1_wide" if self.w1_scale is not None else "table"],
                                  to=TensorProto.FLOAT)]
        if self.w1_scale is not None:
            inits += [numpy_helper.from_array(self.w1_scale.astype(np.float16), "w1_scale"),
                      numpy_helper.from_array(np.asarray([1], dtype=np.int64), "axis1")]
            nodes += [
                helper.make_node("Cast", ["w1_scale"], ["scale_wide"], to=TensorProto.FLOAT),
                helper.make_node("Unsqueeze", ["scale_wide", "axis1"], ["scale_column"]),
                helper.make_node("Mul", ["w1_wide", "scale_column"], ["table"]),  # exact: 7 bits times 11
            ]
        nodes += [
            helper.make_node("Gather", ["table", "indices"], ["rows"], axis=0),  # n x 16
            helper.make_node("Unsqueeze", ["values", "axis0"], ["row"]),  # 1 x n
            helper.make_node("MatMul", ["row", "rows"], ["pre"]),  # 1 x 16
            helper.make_node("Add", ["pre", "b1"], ["pre_bias"]),
            helper.make_node("Relu", ["pre_bias"], ["hidden"]),
            helper.make_node("MatMul", ["hidden", "w2"], ["dot"]),  # 1
            helper.make_node("Add", ["dot", "b2"], ["logit_1"]),
            helper.make_node("Squeeze", ["logit_1", "axis0"], ["logit"]),  # the contract's scalar
        ]
        write_intent_graph(nodes, inits, "edgecloud_intent_hidden_layer", path, version)


def fit_hidden_layer(x: sparse.csr_matrix, y: np.ndarray, weight: np.ndarray, *, hidden: int, epochs: int,
                     alpha: float, seed: int) -> HiddenLayerModel:
    """Adam for a fixed number of epochs (no early stop: the kiosk sets are too small to spare a split), on
    ``weight``-weighted rows. Deterministic for a seed: one thread's arithmetic in a fixed row order."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    model = MLPClassifier(hidden_layer_sizes=(hidden,), alpha=alpha, batch_size=min(256, x.shape[0]),
                          learning_rate_init=1e-3,
                          max_iter=epochs, random_state=seed, early_stopping=False, shuffle=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a fixed epoch count is the recipe, not a failure
        model.fit(x, y, sample_weight=weight / weight.mean())
    w1, w2 = model.coefs_
    b1, b2 = model.intercepts_
    q, scale = quantize_rows(w1)
    return HiddenLayerModel(w1=q, w1_scale=scale, b1=b1.astype(np.float32), w2=w2[:, 0].astype(np.float32),
                            b2=float(b2[0]))


__all__ = ["HiddenLayerModel", "fit_hidden_layer", "quantize_rows"]
