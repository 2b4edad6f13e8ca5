"""recut-intent: a hidden-layer model's cuts chosen again on its split plus rows it never trained on.

The weights stay; the card says what moved; rows the model trained on, held-out rows and rows already in the
split do not join it; paths that are not the model's training run, a linear model and a used output directory
are clean errors that write nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
from pathlib import Path

import pytest

from models import cli as models_cli
from models.intent.runtime import IntentClassifier

DATA = Path(__file__).resolve().parents[2] / "models" / "intent" / "data"
TEXTS = ["Where is the nearest toilet?", "prove that sqrt(2) is irrational", "我的航班延误了，可以改签吗",
         "Plan a three-day trip to Kyoto on a budget", "what time does the pharmacy close"]


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    models_cli.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def _lines(name: str, k: int, seed: int) -> list[str]:
    return random.Random(seed).sample((DATA / name).read_text(encoding="utf-8").splitlines(), k)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A small hidden-layer model trained with a threshold split and a held-out file, and the paths of its run."""
    root = tmp_path_factory.mktemp("recut")
    train = _lines("kiosk_en.jsonl", 70, 0) + _lines("kiosk_zh.jsonl", 70, 0)
    split = _lines("kiosk_test.jsonl", 60, 1)
    held_out = _lines("kiosk_train_v27.jsonl", 20, 2)
    paths = {"train": root / "train.jsonl", "split": root / "split.jsonl", "held": root / "held.jsonl"}
    for key, lines in (("train", train), ("split", split), ("held", held_out)):
        paths[key].write_text("\n".join(lines) + "\n", encoding="utf-8")
    # Rows for the larger split: new ones, a training text, a held-out text and a text already in the split.
    fresh = _lines("kiosk_train_v28.jsonl", 80, 3)
    added = [*fresh, train[0], held_out[0], split[0]]
    paths["added"] = root / "added.jsonl"
    paths["added"].write_text("\n".join(added) + "\n", encoding="utf-8")
    model = root / "model"
    assert _run(["models", "train-intent", "--data", str(paths["train"]), "--threshold-data", str(paths["split"]),
                 "--exclude-data", str(paths["held"]), "--out", str(model), "--model", "hidden-layer",
                 "--no-source-holdout"]) == 0
    return {"root": root, "model": model, "paths": paths, "n_fresh": len({json.loads(x)["text"] for x in fresh})}


def _recut(run: dict, out: Path, *extra: str, train: Path | None = None) -> int:
    p = run["paths"]
    return _run(["models", "recut-intent", "--model", str(run["model"]), "--out", str(out),
                 "--data", str(train or p["train"]), "--threshold-data", str(p["split"]),
                 "--exclude-data", str(p["held"]), "--add-threshold-data", str(p["added"]), *extra])


def _raw(p_shifted: float, tau: float) -> float:
    """P(complex) with the baked label cut taken back out."""
    z = math.log(p_shifted / (1.0 - p_shifted)) + math.log(tau / (1.0 - tau))
    return 1.0 / (1.0 + math.exp(-z))


def test_recut_moves_the_cuts_and_keeps_the_weights(run: dict, tmp_path: Path) -> None:
    out = tmp_path / "recut"
    assert _recut(run, out, "--split-recall", "0.99") == 0
    old = json.loads((run["model"] / "card.json").read_text(encoding="utf-8"))
    new = json.loads((out / "card.json").read_text(encoding="utf-8"))
    cut = new["thresholds"]["routing_cut_p_complex"]
    assert new["version"] == f"{old['version'].split('-cut')[0]}-cut{round(cut * 1e4):04d}"
    assert new["model"]["onnx_sha256"] == hashlib.sha256((out / "intent.onnx").read_bytes()).hexdigest()
    assert new["training_data"] == old["training_data"] and new["features"] == old["features"]
    assert new["thresholds"]["split_recall"] == 0.99
    assert new["recut"]["from_version"] == old["version"]
    assert new["recut"]["from_thresholds"]["routing_cut_p_complex"] == old["thresholds"]["routing_cut_p_complex"]
    # One training text, one held-out text and one text already in the split stay out of the larger split.
    assert (new["recut"]["left_out_trained"], new["recut"]["left_out_held_out"],
            new["recut"]["left_out_already_in_split"]) == (1, 1, 1)
    assert new["recut"]["added_rows"] == run["n_fresh"]
    assert new["metrics"]["threshold_split"]["files"][-1] == "added.jsonl"
    assert new["metrics"]["threshold_split"]["routing"]["all"]["complex_to_cloud"] >= 0.99
    assert new["thresholds"]["chosen_on"].endswith("added.jsonl")

    before, after = IntentClassifier.load(run["model"]), IntentClassifier.load(out)
    assert after.version == new["version"]
    assert after.confidence_threshold == new["thresholds"]["simple_min_confidence"]  # what the router applies
    for text in TEXTS:  # the same network: only where the cuts sit moved
        p_old = _raw(before.predict_proba(text)["complex"], old["thresholds"]["decision_p_complex"])
        p_new = _raw(after.predict_proba(text)["complex"], new["thresholds"]["decision_p_complex"])
        assert p_new == pytest.approx(p_old, abs=1e-5)


def test_the_cards_own_split_gives_back_its_cuts(run: dict, tmp_path: Path) -> None:
    """With no added row that counts, the recut chooses what training chose (the check it makes first)."""
    p = run["paths"]
    empty = tmp_path / "only_trained.jsonl"
    empty.write_text(p["train"].read_text(encoding="utf-8").splitlines()[1] + "\n", encoding="utf-8")
    out = tmp_path / "same"
    assert _run(["models", "recut-intent", "--model", str(run["model"]), "--out", str(out), "--data",
                 str(p["train"]), "--threshold-data", str(p["split"]), "--exclude-data", str(p["held"]),
                 "--add-threshold-data", str(empty)]) == 0
    old = json.loads((run["model"] / "card.json").read_text(encoding="utf-8"))
    new = json.loads((out / "card.json").read_text(encoding="utf-8"))
    for key in ("routing_cut_p_complex", "decision_p_complex", "simple_min_confidence"):
        assert new["thresholds"][key] == pytest.approx(old["thresholds"][key], abs=1e-4)
    assert new["recut"]["added_rows"] == 0 and new["recut"]["left_out_trained"] == 1


def test_other_training_paths_are_refused(run: dict, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text("\n".join(run["paths"]["train"].read_text(encoding="utf-8").splitlines()[5:]) + "\n",
                     encoding="utf-8")
    out = tmp_path / "refused"
    assert _recut(run, out, train=other) == 2
    assert "training_data.sha256" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_used_output_directory_low_recall_and_linear_model_are_clean_errors(
        run: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine", encoding="utf-8")
    assert _recut(run, used) == 2
    assert "not empty" in capsys.readouterr().err
    assert (used / "keep.txt").read_text(encoding="utf-8") == "mine"

    assert _recut(run, tmp_path / "low", "--split-recall", "0.9") == 2
    assert "routing constraint" in capsys.readouterr().err

    p = run["paths"]
    linear = tmp_path / "linear"
    assert _run(["models", "train-intent", "--data", str(p["train"]), "--threshold-data", str(p["split"]),
                 "--out", str(linear), "--no-source-holdout"]) == 0
    assert _run(["models", "recut-intent", "--model", str(linear), "--out", str(tmp_path / "lin_out"),
                 "--data", str(p["train"]), "--threshold-data", str(p["split"]),
                 "--add-threshold-data", str(p["added"])]) == 2
    assert "hidden-layer" in capsys.readouterr().err
