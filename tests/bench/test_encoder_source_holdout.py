"""``bench.encoder_source_holdout``: one source's refit and scoring, on shipped routing rows and made-up
embeddings (the figures are never asserted, only how the two stages relate)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from bench.encoder_source_holdout import _job, _train_config
from models.encoder.runtime import Stack
from models.intent import dataset as ds
from models.intent.augment import Phrases
from models.intent.features import FeatureConfig
from models.intent.train import TrainConfig, _design


@pytest.fixture(scope="module")
def context(routing_data: Path) -> dict:
    rows, _ = ds.load_rows(ds.expand_paths([routing_data]))
    rows = sorted(rows, key=lambda r: ds.text_key(r.text))[:600]
    tc = TrainConfig(model="hidden-layer", hidden=4, epochs=2, source_holdout=False, augment_copies=1)
    design = _design(rows, FeatureConfig(), tc, Phrases.load())
    rng = np.random.default_rng(3)
    embeddings = rng.normal(size=(len(rows), 8)).astype(np.float32)
    return {"rows": rows, "design": design, "tc": tc, "embeddings": embeddings, "cut": 0.72,
            "label_shift": math.log(0.24 / 0.76)}


def _held_out(rows) -> tuple[str, np.ndarray, np.ndarray]:
    source = max({r.source for r in rows}, key=lambda s: sum(r.source == s for r in rows))
    held = np.asarray([i for i, r in enumerate(rows) if r.source == source])
    rest = np.asarray([i for i, r in enumerate(rows) if r.source != source])
    return source, rest, held


def test_without_a_band_the_cascade_is_the_ngram_stage(context) -> None:
    source, rest, held = _held_out(context["rows"])
    never = {**context, "stack": Stack(0.6, 0.45, 0.0, band_confidence=0.0)}
    figures = _job(source, rest, held, never)
    assert figures["n"] == held.size and figures["encoder_share"] == 0.0
    assert figures["cascade_routing_accuracy"] == figures["ngram_routing_accuracy"]
    assert 0.0 <= figures["ngram_label_accuracy"] <= 1.0


def test_with_a_full_band_every_row_goes_to_the_encoder(context) -> None:
    source, rest, held = _held_out(context["rows"])
    always = {**context, "stack": Stack(0.0, 1.0, 0.0, band_confidence=1.01)}
    figures = _job(source, rest, held, always)
    assert figures["encoder_share"] == 1.0 and 0.0 <= figures["cascade_routing_accuracy"] <= 1.0


def test_only_a_hidden_layer_card_is_refitted() -> None:
    with pytest.raises(ValueError, match="hidden-layer"):
        _train_config({"model": {"type": "logistic_regression"}, "thresholds": {"split_recall": 0.995}})
