"""Classification metrics with numpy only, so evaluation runs wherever the runtime runs (no sklearn)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

LABELS = ("simple", "complex")


def confusion(
    y_true: Sequence[str], y_pred: Sequence[str], labels: Sequence[str] = LABELS
) -> list[list[int]]:
    """``matrix[i][j]`` = rows whose true label is ``labels[i]`` predicted as ``labels[j]``."""
    pos = {label: i for i, label in enumerate(labels)}
    matrix = [[0] * len(labels) for _ in labels]
    for t, p in zip(y_true, y_pred, strict=True):
        matrix[pos[t]][pos[p]] += 1
    return matrix


def summarize(y_true: Sequence[str], y_pred: Sequence[str], labels: Sequence[str] = LABELS) -> dict:
    """Accuracy, per-label precision/recall/F1/support and the confusion matrix."""
    matrix = confusion(y_true, y_pred, labels)
    total = sum(sum(r) for r in matrix)
    correct = sum(matrix[i][i] for i in range(len(labels)))
    per_label = {}
    for i, label in enumerate(labels):
        tp = matrix[i][i]
        predicted = sum(matrix[r][i] for r in range(len(labels)))
        support = sum(matrix[i])
        precision = tp / predicted if predicted else 0.0
        recall = tp / support if support else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_label[label] = {
            "precision": round(precision, 4),
            "recall": round(recall, 4),
            "f1": round(f1, 4),
            "support": support,
        }
    return {
        "n": total,
        "accuracy": round(correct / total, 4) if total else 0.0,
        "per_label": per_label,
        "confusion": {"labels": list(labels), "matrix": matrix},
    }


def routing_recall(y_true: Sequence[str], p_complex: Sequence[float], min_simple_confidence: float) -> dict:
    """What the policy sees: a request goes to the cloud if ``complex`` or ``simple`` below the confidence
    threshold. Returns the share of complex requests sent to the cloud and of simple ones sent needlessly."""
    t = np.asarray([y == "complex" for y in y_true])
    p = np.asarray(p_complex, dtype=np.float64)
    cloud = (p >= 0.5) | ((1.0 - p) < min_simple_confidence)
    n_complex = int(t.sum())
    n_simple = int((~t).sum())
    return {
        "min_simple_confidence": round(float(min_simple_confidence), 4),
        "complex_to_cloud": round(float((cloud & t).sum() / n_complex), 4) if n_complex else None,
        "simple_to_cloud": round(float((cloud & ~t).sum() / n_simple), 4) if n_simple else None,
    }


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float:
    """Cohen's kappa of two labellings of the same rows: their agreement beyond what their label shares
    would give by chance (1 = the same labels everywhere, 0 = chance); 1.0 when both give the same one label to
    every row, where chance agreement is already complete."""
    if len(a) != len(b) or not a:
        raise ValueError("two labellings of the same, non-empty rows are needed")
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    chance = sum((list(a).count(label) / n) * (list(b).count(label) / n) for label in set(a) | set(b))
    return 1.0 if chance == 1.0 else (observed - chance) / (1.0 - chance)


def percentiles_ms(latencies_ms: Sequence[float]) -> dict:
    """The models package's one percentile summary: numpy's default, linear interpolation (type 7)."""
    arr = np.asarray(latencies_ms, dtype=np.float64)
    if arr.size == 0:
        return {"n": 0}
    return {
        "n": int(arr.size),
        "p50_ms": round(float(np.percentile(arr, 50)), 4),
        "p90_ms": round(float(np.percentile(arr, 90)), 4),
        "p99_ms": round(float(np.percentile(arr, 99)), 4),
        "max_ms": round(float(arr.max()), 4),
        "mean_ms": round(float(arr.mean()), 4),
    }
