"""The blind second labelling of heldout_v32 and heldout_v36 (``models/intent/data/second_labels``): it covers
every row once, and the agreement figures its README and round v37's record quote are what the file gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.intent.metrics import cohen_kappa

DATA = Path(__file__).resolve().parents[2] / "models" / "intent" / "data"


def _pairs() -> list[tuple[str, str, str, str]]:
    """(set, language, writer's label, second label) for every row of both sets."""
    with (DATA / "second_labels" / "second_labels_v32_v36.jsonl").open(encoding="utf-8") as fh:
        second = [json.loads(line) for line in fh]
    out = []
    for name in ("heldout_v32", "heldout_v36"):
        # Raw lines, not ds.load_rows: that drops a text's second occurrence, and every line was labelled.
        with (DATA / name / f"kiosk_{name}_test.jsonl").open(encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh]
        mine = sorted((r for r in second if r["set"] == name), key=lambda r: r["row"])
        assert [r["row"] for r in mine] == list(range(len(rows))) == list(range(800))
        out += [(name, row["lang"], row["label"], s["label"]) for row, s in zip(rows, mine, strict=True)]
    return out


def test_cohen_kappa() -> None:
    assert cohen_kappa(["a", "b", "a", "b"], ["a", "b", "a", "b"]) == 1.0
    assert cohen_kappa(["a", "a"], ["a", "a"]) == 1.0
    assert cohen_kappa(["a", "b", "a", "b"], ["a", "a", "b", "b"]) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        cohen_kappa(["a"], [])


def test_second_labelling_agrees_as_recorded() -> None:
    pairs = _pairs()
    for name, lang, kappa in (("heldout_v32", "en", 1.0), ("heldout_v36", "en", 1.0),
                              ("heldout_v32", "zh", 1.0), ("heldout_v36", "zh", 0.980)):
        part = [(w, s) for n, lg, w, s in pairs if n == name and lg == lang]
        assert len(part) == 400
        assert round(cohen_kappa([w for w, _ in part], [s for _, s in part]), 3) == kappa
    assert round(cohen_kappa([p[2] for p in pairs], [p[3] for p in pairs]), 3) == 0.995
    assert sum(w == s == "complex" for _, _, w, s in pairs) == 397
    assert sum(w == "complex" for _, _, w, _ in pairs) == 400
    assert sum(w == "simple" and s == "complex" for _, _, w, s in pairs) == 0
