"""The ONNX contract every intent model honours, and the one function that writes it.

The runtime (``runtime.py``) feeds ``indices`` int64[n] and ``values`` float32[n], the sparse hashed features,
and reads ``probs`` float32[2] in (simple, complex) order; ``logit`` is exported too for inspection. A model
kind supplies only the nodes that turn the inputs into ``logit`` and their initializers; the tail
(``softmax([-z/2, z/2]) == [sigmoid(-z), sigmoid(z)]``), the opset (17), the IR version (8, for older
runtimes), the properties and the checker are here, so no model kind can drift from what the runtime reads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import NodeProto, TensorProto, helper, numpy_helper

LABELS = ("simple", "complex")  # the order of ``probs``; the card repeats it


def write_intent_graph(nodes: list[NodeProto], initializers: list[TensorProto], name: str, path: Path,
                       version: str) -> None:
    """Append the ``logit`` -> ``probs`` tail to ``nodes``, check the model and write it to ``path``."""
    tail = [
        helper.make_node("Mul", ["logit", "pair_sign"], ["pair"]),
        helper.make_node("Softmax", ["pair"], ["probs"], axis=-1),
    ]
    graph = helper.make_graph(
        [*nodes, *tail],
        name,
        [
            helper.make_tensor_value_info("indices", TensorProto.INT64, ["n"]),
            helper.make_tensor_value_info("values", TensorProto.FLOAT, ["n"]),
        ],
        [
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("logit", TensorProto.FLOAT, []),
        ],
        initializer=[*initializers, numpy_helper.from_array(np.asarray([-0.5, 0.5], dtype=np.float32), "pair_sign")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="edgecloud")
    model.ir_version = 8
    helper.set_model_props(model, {"version": version, "labels": ",".join(LABELS)})
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())


__all__ = ["LABELS", "write_intent_graph"]
