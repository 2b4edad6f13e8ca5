"""Reading labelled requests (JSONL) and splitting them, shared by training and evaluation.

The dev split is a pure function of the normalised text (a SHA-256 bucket), not of file order or a random
draw: the evaluator can then rebuild exactly the rows the trainer never saw (``--split dev``) from the same
files, and adding a new data file never moves an old row from dev into training.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from models.intent.features import normalize

# Shared data uses the routing target; the classifier uses the request's nature.
LABEL_MAP = {"edge": "simple", "cloud": "complex", "simple": "simple", "complex": "complex"}
DEV_PERCENT = 15
# Files a directory expands to exclude these: hand-written test sets are never trained on.
TEST_FILE_SUFFIX = "_test.jsonl"


@dataclass(frozen=True)
class Row:
    """One labelled request."""

    text: str
    label: str  # simple | complex
    lang: str
    category: str
    source: str
    # Earlier turns for multi-turn rows (kept only when ``load_rows(..., keep_multi_turn=True)``).
    messages: tuple[tuple[str, str], ...] | None = None

    @property
    def multi_turn(self) -> bool:
        return self.messages is not None and len(self.messages) > 1

    def canonical(self) -> str:
        """Stable serialisation used for the training-data digest."""
        return json.dumps(
            {"text": self.text, "label": self.label, "lang": self.lang, "category": self.category,
             "source": self.source},
            ensure_ascii=False,
            sort_keys=True,
        )


@dataclass(frozen=True)
class LoadReport:
    """What was read and what was left out (and why), for the CLI to print."""

    files: list[str]
    rows: int
    skipped_multi_turn: int
    skipped_duplicates: int
    skipped_bad: int


def text_key(text: str) -> str:
    return hashlib.sha256(normalize(text).encode("utf-8")).hexdigest()


def is_dev(text: str) -> bool:
    """True if this text belongs to the dev split (about ``DEV_PERCENT`` % of rows)."""
    return int(text_key(text)[:8], 16) % 100 < DEV_PERCENT


def expand_paths(paths: Sequence[str | Path], include_test_files: bool = False) -> list[Path]:
    """Files as given; directories as their ``*.jsonl`` (sorted), without ``*_test.jsonl`` unless asked."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for child in sorted(path.glob("*.jsonl")):
                if include_test_files or not child.name.endswith(TEST_FILE_SUFFIX):
                    out.append(child)
        elif path.is_file():
            out.append(path)
        else:
            raise FileNotFoundError(f"no such data file or directory: {path}")
    return out


def _is_multi_turn(obj: dict) -> bool:
    messages = obj.get("messages")
    return isinstance(messages, list) and len(messages) > 1


def load_rows(paths: Iterable[Path], keep_multi_turn: bool = False) -> tuple[list[Row], LoadReport]:
    """Read rows, mapping labels to simple/complex.

    Multi-turn rows are skipped (unless ``keep_multi_turn``, for evaluating routing as a whole): the policy
    routes those by turn count, and their first turn alone often reads like an easy query, so training on
    it would teach contradictory labels. Duplicate texts (after normalisation) keep their first occurrence.
    """
    rows: list[Row] = []
    seen: set[str] = set()
    files: list[str] = []
    multi = dup = bad = 0
    for path in paths:
        files.append(str(path))
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                    text = str(obj["text"])
                    label = LABEL_MAP[str(obj["label"])]
                except (ValueError, KeyError):
                    bad += 1
                    continue
                messages = None
                if _is_multi_turn(obj):
                    multi += 1
                    if not keep_multi_turn:
                        continue
                    messages = tuple((str(m.get("role", "user")), str(m.get("content", "")))
                                     for m in obj["messages"] if isinstance(m, dict))
                key = text_key(text) if messages is None else text_key(json.dumps(messages, ensure_ascii=False))
                if key in seen:
                    dup += 1
                    continue
                seen.add(key)
                rows.append(
                    Row(
                        text=text,
                        label=label,
                        lang=str(obj.get("lang", "en")),
                        category=str(obj.get("category", "")),
                        source=str(obj.get("source", path.stem)),
                        messages=messages,
                    )
                )
    return rows, LoadReport(files, len(rows), multi, dup, bad)


def digest(rows: Iterable[Row]) -> str:
    """SHA-256 over the canonical rows in a fixed order, independent of file order."""
    h = hashlib.sha256()
    for line in sorted(row.canonical() for row in rows):
        h.update(line.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()
