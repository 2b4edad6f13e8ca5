"""The paths of the shipped intent model's training run that this repository holds (docs/intent.md, *Commands*).

The shipped model also trained on the shared routing data, which a clone of the repository does not have. A bench
that starts from the shipped model's own rows reads that folder only when its caller names it (``--shared-data
DIR``) and adds it in front of these; without it the card's digest check (``prepare_run_rows``) says the rows differ.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "models" / "intent" / "data"
FOCUS = (16, 22, 23, 24, 29)
TRAIN_PATHS = [str(DATA)] + [str(DATA / f"focus{n}" / f"kiosk_focus{n}_{lang}.jsonl")
                             for n in FOCUS for lang in ("en", "zh")]
THRESHOLD_PATHS = [str(DATA / p) for p in ("threshold", "kiosk_test.jsonl", "heldout", "heldout_v15", "heldout_v16",
                                           "heldout_v17", "heldout_v17/second_zh")]
EXCLUDE_PATHS = [str(DATA / "heldout_v5"), str(REPO / "bench" / "data" / "routing")]


def train_paths(shared_data: Path | str | None) -> list[str]:
    """The run's training paths: the shared routing data first when it is given, then the repository's."""
    return ([str(shared_data)] if shared_data else []) + TRAIN_PATHS


__all__ = ["EXCLUDE_PATHS", "THRESHOLD_PATHS", "TRAIN_PATHS", "train_paths"]
