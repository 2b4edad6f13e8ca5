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


def _run(rest, held, context: dict, stack: Stack) -> dict:
    return _job(rest, held, stack=stack, **context)


def _held_out(rows) -> tuple[str, np.ndarray, np.ndarray]:
    source = max({r.source for r in rows}, key=lambda s: sum(r.source == s for r in rows))
    held = np.asarray([i for i, r in enumerate(rows) if r.source == source])
    rest = np.asarray([i for i, r in enumerate(rows) if r.source != source])
    return source, rest, held


def test_without_a_band_the_cascade_is_the_ngram_stage(context) -> None:
    _source, rest, held = _held_out(context["rows"])
    figures = _run(rest, held, context, Stack(0.6, 0.45, 0.0, band_confidence=0.0))
    assert figures["n"] == held.size and figures["encoder_share"] == 0.0
    assert figures["cascade_routing_accuracy"] == figures["ngram_routing_accuracy"]
    assert 0.0 <= figures["ngram_label_accuracy"] <= 1.0


def test_with_a_full_band_every_row_goes_to_the_encoder(context) -> None:
    _source, rest, held = _held_out(context["rows"])
    figures = _run(rest, held, context, Stack(0.0, 1.0, 0.0, band_confidence=1.01))
    assert figures["encoder_share"] == 1.0 and 0.0 <= figures["cascade_routing_accuracy"] <= 1.0


def test_only_a_hidden_layer_card_is_refitted() -> None:
    with pytest.raises(ValueError, match="hidden-layer"):
        _train_config({"model": {"type": "logistic_regression"}, "thresholds": {"split_recall": 0.995}})


def test_the_figures_are_recorded_in_the_card_of_the_model_they_were_measured_on(tmp_path: Path) -> None:
    import json
    import shutil

    from bench.encoder_source_holdout import write_to_card
    from models.intent.evaluate import format_report
    from models.intent.runtime import DEFAULT_MODEL_DIR, IntentClassifier

    model = tmp_path / "model"
    shutil.copytree(DEFAULT_MODEL_DIR, model, ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    version = json.loads((model / "card.json").read_text())["version"]
    figures = {"n": 50, "labels": {"simple": 50}, "ngram_label_accuracy": 0.7, "ngram_routing_accuracy": 0.8,
               "cascade_routing_accuracy": 0.9, "encoder_share": 0.2, "seconds": 1.0}
    kept = {"n", "labels", "ngram_routing_accuracy", "cascade_routing_accuracy", "encoder_share"}
    with pytest.raises(ValueError, match="not of"):
        write_to_card(model, {"model": "another-model", "sources": {"clinc150": figures}})
    write_to_card(model, {"model": version, "sources": {"clinc150": figures, "broken": {"error": "x"}}})
    card = IntentClassifier.load(model).card
    recorded = card["encoder"]["source_holdout"]["sources"]
    assert recorded == {"clinc150": {k: v for k, v in figures.items() if k in kept}}
    assert card["version"] == version  # the model is the same; its card says more
    # the n-gram stage's own figures: a card that has them keeps them, a card without them gets the bench's
    for own, expected in (({"clinc150": {"accuracy": 0.6, "labels": {"simple": 50}, "n": 50}}, 0.6), (None, 0.7)):
        edited = json.loads((model / "card.json").read_text())
        edited["metrics"].pop("source_holdout_by", None)
        edited["metrics"]["source_holdout"] = own
        (model / "card.json").write_text(json.dumps(edited))
        write_to_card(model, {"model": version, "sources": {"clinc150": figures}})
        metrics = json.loads((model / "card.json").read_text())["metrics"]
        assert metrics["source_holdout"]["clinc150"] == {"accuracy": expected, "labels": {"simple": 50}, "n": 50}
        assert ("source_holdout_by" in metrics) == (own is None)
    report = {"source_holdout_from_card": {"clinc150": {"n": 50, "accuracy": 0.7}},
              "source_holdout_both_stages_from_card": card["encoder"]["source_holdout"]}
    lines = [line for line in _holdout_lines(report, format_report) if "clinc150" in line]
    assert lines and "0.8000" in lines[0] and "0.9000" in lines[0]


def _holdout_lines(holdout: dict, format_report) -> list[str]:
    """format_report's leave-one-source-out lines, from a report that has only those fields filled."""
    from models.intent.evaluate import evaluate

    report = evaluate([str(Path(__file__).resolve().parents[2] / "models" / "intent" / "data" / "heldout_v47")])
    report.update(holdout)
    return format_report(report).splitlines()


def test_the_shipped_model_without_the_shared_data_is_a_clear_error(capsys) -> None:
    """A clone has no shared routing data: the default paths are the repository's, and the digest check says
    what is missing instead of measuring other rows."""
    from bench.encoder_source_holdout import main

    assert main(["--out", "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert "rows this model was trained on" in err and "--shared-data" in err
