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
45 us for a 900-feature request), and that difference grows with the message. The first layer is stored as
float16 (half the file) and widened after the gather; ``p_complex`` here applies the same rounding, so the
threshold chosen in training is the one the kiosk's ONNX run meets.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from scipy import sparse

from models.intent.onnx_graph import write_intent_graph


@dataclass(frozen=True)
class HiddenLayerModel:
    """``logit = w2 · relu(x @ w1 + b1) + b2``; P(complex) is its sigmoid."""

    w1: np.ndarray  # (dim, hidden) float16: what the ONNX file stores
    b1: np.ndarray  # (hidden,) float32
    w2: np.ndarray  # (hidden,) float32
    b2: float

    def logit(self, x: sparse.csr_matrix) -> np.ndarray:
        hidden = np.maximum(x @ self.w1.astype(np.float64) + self.b1.astype(np.float64), 0.0)
        return hidden @ self.w2.astype(np.float64) + self.b2

    def p_complex(self, x: sparse.csr_matrix) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.logit(x)))

    def shifted(self, delta: float) -> HiddenLayerModel:
        """The same network with ``delta`` taken off the output bias (the label cut baked in)."""
        return replace(self, b2=self.b2 - delta)

    def export(self, path: Path, version: str) -> None:
        """Write the graph; inputs, outputs and format as every intent model's (``onnx_graph``)."""
        inits = [
            numpy_helper.from_array(self.w1.astype(np.float16), "w1"),
            numpy_helper.from_array(self.b1.astype(np.float32), "b1"),
            numpy_helper.from_array(self.w2.astype(np.float32), "w2"),
            numpy_helper.from_array(np.asarray(self.b2, dtype=np.float32), "b2"),
            numpy_helper.from_array(np.asarray([0], dtype=np.int64), "axis0"),
        ]
        nodes = [
            helper.make_node("Gather", ["w1", "indices"], ["rows16"], axis=0),  # n x 16
            helper.make_node("Cast", ["rows16"], ["rows"], to=TensorProto.FLOAT),
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
    return HiddenLayerModel(w1=w1.astype(np.float16), b1=b1.astype(np.float32), w2=w2[:, 0].astype(np.float32),
                            b2=float(b2[0]))


__all__ = ["HiddenLayerModel", "fit_hidden_layer"]
