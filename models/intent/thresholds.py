"""Where the intent classifier's cuts sit: the decision threshold and the router's minimum confidence.

The hard constraint is routing recall: complex requests must reach the cloud. ``thresholds_on_split``
chooses the cuts on a labelled split no fit has seen (the largest cut on P(complex) that keeps complex
recall at the target, then the most accurate label cut no more lenient than it);
``thresholds_out_of_fold`` chooses them on out-of-fold predictions when there is no such split.
``routing_report`` gives the edge/cloud figures per language that the model card records.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from models.intent import dataset as ds

if TYPE_CHECKING:
    from models.intent.train import TrainConfig


def choose_thresholds(y_true: list[str], p: np.ndarray, tc: TrainConfig) -> tuple[float, float]:
    """(decision threshold on P(complex), recommended minimum confidence for a simple label).

    Recall is counted per row, unweighted. (Weighting it like training, kiosk rows 12x, was tried: the
    few hand-written complex rows that are hard out-of-fold then dominate and drive the threshold to 0.03.)
    """
    t = np.asarray([label == "complex" for label in y_true])
    if not t.any():
        return 0.5, 0.5

    def recall(cloud: np.ndarray) -> float:
        return float(cloud[t].mean())

    # Largest threshold (<= 0.5: never trade recall for precision) keeping complex recall at target.
    tau = 0.02
    for cand in np.round(np.arange(0.5, 0.019, -0.01), 2):
        if recall(p >= cand) >= tc.target_complex_recall:
            tau = float(cand)
            break
    shifted = shift(p, tau)
    conf = 0.99
    for cand in np.round(np.arange(0.5, 1.0, 0.01), 2):
        if recall((shifted >= 0.5) | ((1.0 - shifted) < cand)) >= tc.target_routing_recall:
            conf = float(cand)
            break
    return tau, conf


def shift(p: np.ndarray, tau: float) -> np.ndarray:
    """Probabilities after moving the decision point from ``tau`` to 0.5 (what the baked bias does)."""
    z = np.log(np.clip(p, 1e-12, 1 - 1e-12) / np.clip(1 - p, 1e-12, 1))
    return 1.0 / (1.0 + np.exp(-(z - logit(tau))))


def logit(p: float) -> float:
    return math.log(p / (1.0 - p))


@dataclass(frozen=True)
class Thresholds:
    """Where the model's two cuts sit, and why.

    ``decision_p_complex`` is the cut on the raw P(complex) baked into the ONNX bias (so the label is the
    argmax); ``simple_min_confidence`` is the confidence a ``simple`` label needs to stay on the device,
    the number the router uses. Together they are one cut on P(complex): the largest that keeps complex
    recall at ``target`` on the threshold split, which sends the fewest simple requests to the cloud
    that the constraint allows.
    """

    decision_p_complex: float
    simple_min_confidence: float
    routing_cut_p_complex: float
    chosen_on: str


def largest_cut(t: np.ndarray, p: np.ndarray, target: float) -> float:
    """Largest cut on P(complex) with recall of the complex rows at ``target`` or above."""
    pc = np.sort(p[t])
    if pc.size == 0:
        return 0.5
    allowed = math.floor(pc.size * (1.0 - target) + 1e-9)  # complex rows that may stay on the edge
    return float(math.floor(pc[allowed] * 1e4) / 1e4)  # rounded down: that row itself still goes


def thresholds_on_split(y_true: Sequence[str], p: np.ndarray, tc: TrainConfig, name: str) -> Thresholds:
    """The cuts chosen on a labelled split that no fit has seen (see ``Thresholds``)."""
    t = np.asarray([label == "complex" for label in y_true])
    cut = min(largest_cut(t, p, tc.split_recall), 0.5)  # TrainConfig keeps it >= the routing constraint
    # The label's own cut: the most accurate one on the split, never more lenient than the routing cut.
    grid = np.round(np.arange(0.05, 0.951, 0.01), 2)
    accuracy = [float(((p >= g) == t).mean()) for g in grid]
    tau = float(grid[int(np.argmax(accuracy))])
    tau = max(tau, cut)
    conf = 1.0 - float(shift(np.asarray([cut]), tau)[0]) if cut < tau else 0.5
    conf = math.floor(conf * 1e4) / 1e4  # rounded down: the edge keeps nothing the cut sends away
    return Thresholds(tau, max(conf, 0.5), cut, name)


def thresholds_out_of_fold(y_true: Sequence[str], p: np.ndarray, tc: TrainConfig) -> Thresholds:
    tau, conf = choose_thresholds(list(y_true), p, tc)
    cut = 1.0 / (1.0 + math.exp(-(logit(tau) + logit(1.0 - conf)))) if conf > 0.5 else tau
    return Thresholds(tau, conf, round(cut, 4), f"{tc.folds}-fold out-of-fold predictions")


def routing(y_true: Sequence[str], p_shifted: np.ndarray, conf: float) -> dict:
    """Routing figures on a split: accuracy of edge/cloud against simple/complex and both error rates."""
    t = np.asarray([label == "complex" for label in y_true])
    cloud = (p_shifted >= 0.5) | ((1.0 - p_shifted) < conf)
    return {
        "n": int(t.size),
        "accuracy": round(float((cloud == t).mean()), 4) if t.size else None,
        "complex_to_cloud": round(float(cloud[t].mean()), 4) if t.any() else None,
        "simple_to_cloud": round(float(cloud[~t].mean()), 4) if (~t).any() else None,
    }


def routing_report(rows: Sequence[ds.Row], p_shifted: np.ndarray, conf: float) -> dict:
    report = {"all": routing([r.label for r in rows], p_shifted, conf)}
    for lang in sorted({r.lang for r in rows}):
        sel = np.asarray([r.lang == lang for r in rows])
        report[lang] = routing([r.label for r, s in zip(rows, sel, strict=True) if s], p_shifted[sel], conf)
    return report
