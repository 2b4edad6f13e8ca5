"""The hidden-layer model: its ONNX graph computes what training scored, and train-intent ships it."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from scipy import sparse

from models import cli as models_cli
from models.intent.features import FeatureConfig, featurize
from models.intent.hidden_layer import HiddenLayerModel, fit_hidden_layer, quantize_rows
from models.intent.runtime import IntentClassifier
from models.intent.train import TrainConfig

DATA = Path(__file__).resolve().parents[2] / "models" / "intent" / "data"
TEXTS = ("where is the restroom", "洗手间在哪里", "prove that sqrt(2) is irrational", "",
         "Hi! My mother is on dialysis and we are exhausted. Is the café on this floor open?")


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    models_cli.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def _rows(fc: FeatureConfig, texts: tuple[str, ...]) -> sparse.csr_matrix:
    parts = [featurize(t, fc) for t in texts]
    indptr = np.cumsum([0] + [len(i) for i, _ in parts])
    m = sparse.csr_matrix((np.concatenate([v for _, v in parts]).astype(np.float64),
                           np.concatenate([i for i, _ in parts]), indptr), shape=(len(texts), fc.dim))
    m.sum_duplicates()
    return m


@pytest.mark.parametrize("table", ["int8", "float16"])
def test_the_onnx_graph_computes_the_fitted_network(tmp_path: Path, table: str) -> None:
    """A random network, exported: onnxruntime on the sparse input gives the logit the trainer computed
    (the int8 first layer with its row scales, or a float16 one as models before it stored), for repeated
    indices and for an empty request too."""
    fc = FeatureConfig()
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 1, (fc.dim, 4))
    first = dict(zip(("w1", "w1_scale"), quantize_rows(w1), strict=True)) if table == "int8" else {
        "w1": w1.astype(np.float16)}
    model = HiddenLayerModel(**first, b1=rng.normal(0, 1, 4).astype(np.float32),
                             w2=rng.normal(0, 1, 4).astype(np.float32), b2=0.3)
    path = tmp_path / "m.onnx"
    model.shifted(0.5).export(path, "test")
    session = ort.InferenceSession(path.read_bytes(), providers=["CPUExecutionProvider"])
    expected = model.shifted(0.5).logit(_rows(fc, TEXTS))
    for text, want in zip(TEXTS, expected, strict=True):
        idx, val = featurize(text, fc)
        probs, logit = session.run(["probs", "logit"], {"indices": idx, "values": val})
        assert logit == pytest.approx(want, abs=1e-3)
        assert probs[1] == pytest.approx(1 / (1 + np.exp(-want)), abs=1e-4)
    repeated = session.run(["logit"], {"indices": np.array([5, 5], dtype=np.int64),
                                       "values": np.array([1.0, 2.0], dtype=np.float32)})[0]
    assert repeated == pytest.approx(model.shifted(0.5).logit(sparse.csr_matrix(
        ([3.0], ([0], [5])), shape=(1, fc.dim)))[0], abs=1e-3)


def test_the_table_is_widened_once_when_the_session_loads(tmp_path: Path) -> None:
    """The int8 table and its scales are constants: onnxruntime folds their widening when the session loads, so
    what runs per request gathers from one float32 table, as the float16 graph's did, with no dequantizing."""
    from models.intent.runtime import _session_options

    rng = np.random.default_rng(4)
    q, scale = quantize_rows(rng.normal(0, 1, (64, 4)))
    model = HiddenLayerModel(w1=q, w1_scale=scale, b1=np.zeros(4, np.float32), w2=np.ones(4, np.float32), b2=0.0)
    model.export(tmp_path / "m.onnx", "test")
    options = _session_options()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession((tmp_path / "m.onnx").read_bytes(), options, providers=["CPUExecutionProvider"])
    optimized = onnx.load(str(tmp_path / "optimized.onnx")).graph
    constants = {t.name for t in optimized.initializer}
    gather = next(n for n in optimized.node if n.op_type == "Gather")
    assert gather.input[0] in constants and "Cast" not in {n.op_type for n in optimized.node}
    table = next(t for t in optimized.initializer if t.name == gather.input[0])
    assert np.array_equal(onnx.numpy_helper.to_array(table), q.astype(np.float32) * scale.astype(np.float32)[:, None])


def test_rows_are_stored_in_int8_within_half_a_step_of_their_own_scale() -> None:
    rng = np.random.default_rng(2)
    w = rng.normal(0, 1, (50, 16)) * rng.choice([1e-3, 1.0, 30.0], 50)[:, None]
    w[7] = 0.0
    w[9] = 1e-9  # under float16's smallest scale over 127: the smallest scale, zeros
    q, scale = quantize_rows(w)
    assert q.dtype == np.int8 and scale.dtype == np.float16 and q.shape == w.shape and scale.shape == (50,)
    wide = scale.astype(np.float64)[:, None]
    assert np.all(np.abs(q.astype(np.float64) * wide - w) <= wide / 2)
    assert np.abs(q[~np.isin(np.arange(50), [7, 9])]).max(axis=1).min() >= 126  # each row uses its range
    assert scale[7] == 0 and not q[7].any() and not q[9].any()


def test_fitting_is_deterministic_and_learns_an_interaction() -> None:
    """XOR of two features: no single weight per feature can say it, a hidden layer can."""
    rng = np.random.default_rng(1)
    dense = (rng.random((600, 16)) < 0.5).astype(np.float64)
    y = (dense[:, 0] != dense[:, 1]).astype(np.int64)
    x = sparse.csr_matrix(dense)
    w = np.ones(600)
    a = fit_hidden_layer(x, y, w, hidden=8, epochs=400, alpha=1e-4, seed=5)
    b = fit_hidden_layer(x, y, w, hidden=8, epochs=400, alpha=1e-4, seed=5)
    assert np.array_equal(a.w1, b.w1) and a.b2 == b.b2
    assert ((a.p_complex(x) >= 0.5) == y).mean() > 0.95


def test_an_unknown_model_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="model must be one of"):
        TrainConfig(model="forest")


@pytest.mark.slow
def test_train_intent_ships_a_hidden_layer_model_the_runtime_loads(tmp_path: Path) -> None:
    rows = []
    for name in ("kiosk_en.jsonl", "kiosk_zh.jsonl"):
        lines = (DATA / name).read_text(encoding="utf-8").splitlines()
        rows += random.Random(0).sample(lines, 60)
    sample = tmp_path / "sample.jsonl"
    sample.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "model"
    assert _run(["models", "train-intent", "--data", str(sample), "--out", str(out), "--model", "hidden-layer",
                 "--no-source-holdout"]) == 0
    card = json.loads((out / "card.json").read_text(encoding="utf-8"))
    assert card["model"]["type"] == "hidden_layer" and card["model"]["hidden_units"] == 16
    # the first layer is the int8 table with its row scales, and the version says so
    stored = {t.name: t.data_type for t in onnx.load(str(out / "intent.onnx")).graph.initializer}
    assert stored["w1"] == onnx.TensorProto.INT8 and stored["w1_scale"] == onnx.TensorProto.FLOAT16
    assert card["version"].split("-cut")[0].endswith("-int8")
    clf = IntentClassifier.load(out)
    for text in TEXTS:
        result = clf.classify(text)
        assert result.label in ("simple", "complex")
        assert sum(result.probs.values()) == pytest.approx(1.0, abs=1e-5)
    # The router applies the card's threshold to what this graph returns.
    assert clf.confidence_threshold == card["thresholds"]["simple_min_confidence"]
    assert card["metrics"]["dev"]["n"] > 0  # dev figures come from loading the written files


@pytest.mark.slow
def test_source_holdout_in_forked_processes_equals_one_process(routing_data: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The hidden layer's leave-one-source-out runs one process a core; the figures are those of a single
    process, source for source."""
    rows = []
    for name in ("clinc150.jsonl", "gsm8k.jsonl", "cmrc2018.jsonl", "cmath.jsonl"):
        lines = (routing_data / name).read_text(encoding="utf-8").splitlines()
        rows += random.Random(1).sample(lines, 20)
    rows += random.Random(1).sample((DATA / "kiosk_zh.jsonl").read_text(encoding="utf-8").splitlines(), 40)
    path = tmp_path / "shared_sample.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    cards = []
    for cpus in (2, 1):
        monkeypatch.setattr("models.intent.train.os.cpu_count", lambda n=cpus: n)
        out = tmp_path / f"model{cpus}"
        assert _run(["models", "train-intent", "--data", str(path), "--out", str(out), "--model",
                     "hidden-layer"]) == 0
        cards.append(json.loads((out / "card.json").read_text(encoding="utf-8")))
    assert set(cards[0]["metrics"]["source_holdout"]) == {"clinc150", "gsm8k", "cmrc2018", "cmath"}
    assert cards[0]["metrics"]["source_holdout"] == cards[1]["metrics"]["source_holdout"]
