"""Choose a trained hidden-layer model's cuts again on a larger split, its weights left as they are.

The routing cut is set by the lowest-scored complex rows of the threshold split. A split written by the
writers of earlier rounds can say recall 0.995 where requests by fresh writers get 0.95-0.97; fresh sets read
after training, which the model never trained on, are a better split. A refit with them in ``--threshold-data``
would also drop their texts from training and change the weights, so the cut could not be compared with the
model's; ``recut`` keeps the weights and moves only the cuts.

The rules it enforces:

* The model is a hidden-layer model whose card records a threshold split; a linear model, or one whose cut came
  from out-of-fold predictions, is refused (``ValueError``).
* The training, threshold and held-out paths are the ones the model was trained with: the rows they give must
  hash to the card's ``training_data.sha256``, or nothing is written.
* The model's own split, read again, gives back the card's cuts before anything moves (the reconstruction of
  the unshifted network is checked, not assumed).
* Added split rows whose text the model trained on, or that a held-out set holds, are left out and counted;
  so is a text already in the split.
* The cuts are chosen as training chooses them (``thresholds_on_split``: the largest routing cut keeping
  ``split_recall`` of the split's complex rows, the most accurate label cut no more lenient), on the old split
  and the added rows together.
* Only the output bias changes: the new file's P(complex), unshifted, equals the old file's (checked on every
  split row before the card is written). The card keeps the training record and the leave-one-source-out
  figures (fits at a fixed 0.5 cut, not at the routing cut), and says what was recut from what under
  ``recut``; the version gets a ``-cut`` suffix with the new routing cut in ten-thousandths.

I/O is files in, files out: ``recut`` reads the model directory and the data paths and writes a new directory.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from models.intent import dataset as ds
from models.intent.features import FeatureConfig
from models.intent.hidden_layer import HiddenLayerModel
from models.intent.runtime import CARD_FILE, MODEL_FILE
from models.intent.thresholds import logit, thresholds_on_split
from models.intent.train import (
    TrainConfig,
    cut_version,
    feature_matrix,
    prepare_run_rows,
    threshold_split_metrics,
    thresholds_entry,
    write_card,
)

# Reading the split again must give the card's cuts; the unshifted bias is rebuilt from a float32, so the
# probabilities may move in the seventh digit and a cut (rounded to 1e-4) by one step at most.
CUT_TOLERANCE = 1e-4
P_TOLERANCE = 1e-5


def load_hidden_layer(model_dir: Path) -> tuple[HiddenLayerModel, dict]:
    """The network as the ONNX file stores it (label cut baked into ``b2``) and its card."""
    card = json.loads((model_dir / CARD_FILE).read_text(encoding="utf-8"))
    if card.get("model", {}).get("type") != "hidden_layer":
        raise ValueError("recut needs a hidden-layer model (train-intent --model hidden-layer)")
    return _network(model_dir / MODEL_FILE), card


def _network(path: Path) -> HiddenLayerModel:
    arrays = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    missing = {"w1", "b1", "w2", "b2"} - arrays.keys()
    if missing:
        raise ValueError(f"{path} lacks {sorted(missing)}: not a hidden-layer intent graph")
    return HiddenLayerModel(w1=arrays["w1"], b1=arrays["b1"], w2=arrays["w2"], b2=float(arrays["b2"]),
                            w1_scale=arrays.get("w1_scale"))


def recut(model_dir: str | Path, out_dir: str | Path, *, data: Sequence[str | Path],
          threshold_data: Sequence[str | Path], add_threshold_data: Sequence[str | Path],
          exclude_data: Sequence[str | Path] = (), split_recall: float | None = None,
          log=print) -> dict:
    """Write ``out_dir`` with ``model_dir``'s weights and the cuts its split and ``add_threshold_data`` choose;
    return the new card.

    ``data``, ``threshold_data`` and ``exclude_data`` are the paths the model was trained with (checked
    against the card's digest); ``split_recall`` defaults to the card's.
    """
    src, out = Path(model_dir), Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty: recut writes a new model directory")
    net, card = load_hidden_layer(src)
    cuts = card["thresholds"]
    if not card.get("metrics", {}).get("threshold_split"):
        raise ValueError("the model's cut came from out-of-fold predictions, not a threshold split: retrain instead")
    tc = TrainConfig(split_recall=split_recall if split_recall is not None else cuts["split_recall"])
    fc = FeatureConfig.from_dict(card["features"])

    prepared, train = prepare_run_rows(card, data, threshold_data, exclude_data)

    trained = {ds.text_key(r.text) for r in train}
    old_rows = prepared.held_rows
    in_split = {ds.text_key(r.text) for r in old_rows}
    added_files = ds.expand_paths(add_threshold_data, include_test_files=True)
    candidates, _ = ds.load_rows(added_files)
    added: list[ds.Row] = []
    n_trained = n_held_out = n_dup = 0
    for row in candidates:
        key = ds.text_key(row.text)
        if key in trained:
            n_trained += 1
        elif key in prepared.excluded_keys:
            n_held_out += 1
        elif key in in_split:
            n_dup += 1
        else:
            in_split.add(key)
            added.append(row)
    split = [*old_rows, *added]  # the model's own split first: its cuts are checked on p[:len(old_rows)]
    x = feature_matrix([r.text for r in split], fc)
    raw = net.shifted(-logit(cuts["decision_p_complex"]))  # the label cut taken back out of the bias
    p = raw.p_complex(x)

    old = thresholds_on_split([r.label for r in old_rows], p[:len(old_rows)],
                              TrainConfig(split_recall=cuts["split_recall"]), cuts["chosen_on"])
    if (abs(old.routing_cut_p_complex - cuts["routing_cut_p_complex"]) > CUT_TOLERANCE
            or abs(old.decision_p_complex - cuts["decision_p_complex"]) > CUT_TOLERANCE):
        raise ValueError(f"the model's own split gives cuts {old.routing_cut_p_complex}/{old.decision_p_complex}, "
                         f"not the card's {cuts['routing_cut_p_complex']}/{cuts['decision_p_complex']}: "
                         "the split paths differ from its training run")

    chosen_on = ", ".join([cuts["chosen_on"], *(f.name for f in added_files)])
    new = thresholds_on_split([r.label for r in split], p, tc, chosen_on)
    log(f"split {len(split)} rows ({len(added)} added; left out: {n_trained} trained on, {n_held_out} held out, "
        f"{n_dup} already in the split): routing cut P(complex) >= {new.routing_cut_p_complex} "
        f"(was {cuts['routing_cut_p_complex']}), label cut {new.decision_p_complex}, simple confidence >= "
        f"{new.simple_min_confidence}")

    version = cut_version(card["version"], new.routing_cut_p_complex)
    out.mkdir(parents=True, exist_ok=True)
    raw.shifted(logit(new.decision_p_complex)).export(out / MODEL_FILE, version)
    p_check = _network(out / MODEL_FILE).shifted(-logit(new.decision_p_complex)).p_complex(x)
    if not np.allclose(p_check, p, atol=P_TOLERANCE, rtol=0):
        shutil.rmtree(out)
        raise RuntimeError("the rewritten model's P(complex) differs from the original's: nothing written")

    new_card = json.loads(json.dumps(card))
    new_card["version"] = version
    new_card["model"]["onnx_sha256"] = hashlib.sha256((out / MODEL_FILE).read_bytes()).hexdigest()
    new_card["thresholds"] = thresholds_entry(new, tc)
    new_card["metrics"]["threshold_split"] = threshold_split_metrics(
        [*card["metrics"]["threshold_split"]["files"], *(f.name for f in added_files)], split, p, new)
    new_card["recut"] = {
        "from_version": card["version"],
        "from_onnx_sha256": card["model"]["onnx_sha256"],
        "from_thresholds": {k: cuts[k] for k in ("decision_p_complex", "simple_min_confidence",
                                                 "routing_cut_p_complex", "split_recall", "chosen_on")},
        "added_files": [f.name for f in added_files],
        "added_rows": len(added),
        "left_out_trained": n_trained,
        "left_out_held_out": n_held_out,
        "left_out_already_in_split": n_dup,
        "note": "weights unchanged; only the output bias (the label cut) and the routing cut moved",
    }
    write_card(new_card, out)
    log(f"threshold split: {new_card['metrics']['threshold_split']['routing']['all']}")
    log(f"wrote {out / MODEL_FILE} and {out / CARD_FILE} (version {version})")
    return new_card
